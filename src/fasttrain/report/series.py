"""What the plots draw, computed from a run's rows; pure (no I/O, no drawing), so it is tested on fixed rows.

Time on every plot is the run's clock (seconds from the command's start; after a resume it counts on from the time
trained before the stop, not the stop itself: train/run/run_clock.py). Epoch rows carry it (`elapsed_s`); a step row
has only its wall time (`time`, Unix seconds), so its clock comes from the epoch row's: `time - elapsed_s` is the
clock's origin in that process. Between two epoch rows whose origins differ a resume came between them, and the rows
are split at the longest pause (the stop and the new process's start-up). A resume with no epoch row on one side uses
summary.json's `resumed_clock.before_s` (the clock at the checkpoint); a run without any epoch row with its clock
counts from its first logged step.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from fasttrain.report.gather import RunRecord
from fasttrain.train.loop.epoch_row import EpochRow

SAME_PROCESS_S = 0.5   # two epoch rows whose clock origins are this close came from one process
RESTART_GAP_S = 2.0    # a pause between logged rows this long may be a stop and a resume (a process's start-up)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def _split(times: list[float], before: float | None, after: float | None) -> tuple[int, float]:
    """Where a run of rows is cut by the longest pause: (k, its length); rows[:k] are the earlier process's."""
    edges = ([before] if before is not None else []) + times + ([after] if after is not None else [])
    offset = 0 if before is not None else 1
    gaps = [(edges[i + 1] - edges[i], i + offset) for i in range(len(edges) - 1)]
    if not gaps:
        return 0, 0.0
    gap, k = max(gaps)
    return k, gap


def step_clock(rows: list[dict[str, Any]], resumed_before_s: float | None) -> list[float]:
    """The run's clock (seconds) at each step row of `rows` (metrics.jsonl's rows in file order). Pure."""
    anchors = [(i, t - e) for i, r in enumerate(rows) if r.get("kind") == "epoch"
               for t, e in [(_num(r.get("time")), _num(EpochRow.from_json(r).elapsed_s))]
               if t is not None and e is not None]
    steps = [i for i, r in enumerate(rows) if r.get("kind") == "step" and _num(r.get("time")) is not None]
    placed = any(abs(a[1] - b[1]) >= SAME_PROCESS_S for a, b in pairwise(anchors))
    resumed = resumed_before_s is not None and not placed
    origin: dict[int, float] = {}
    bounds: list[tuple[int, float | None]] = [(-1, None), *anchors, (len(rows), None)]
    for (ia, oa), (ib, ob) in pairwise(bounds):
        members = [i for i in steps if ia < i < ib]
        if not members:
            continue
        times = [float(rows[i]["time"]) for i in members]
        left_t = float(rows[ia]["time"]) if oa is not None else None
        right_t = float(rows[ib]["time"]) if ob is not None else None
        if oa is not None and ob is not None and abs(oa - ob) >= SAME_PROCESS_S:
            k, _ = _split(times, left_t, right_t)
            origins = [oa] * k + [ob] * (len(times) - k)
        elif (oa is None or ob is None) and resumed and _split(times, left_t, right_t)[1] >= RESTART_GAP_S:
            k, _ = _split(times, left_t, right_t)
            before = float(resumed_before_s or 0.0)
            # 0.0 where there is no step on that side of the gap (k == 0, k == len(times)): never read then
            early = oa if oa is not None else (times[k - 1] - before if k else 0.0)
            late = ob if ob is not None else (times[k] - before if k < len(times) else 0.0)
            origins = [early if j < k else late for j in range(len(times))]
        else:
            known = oa if oa is not None else ob
            origins = [known if known is not None else times[0]] * len(times)
        origin.update(dict(zip(members, origins, strict=True)))
    return [float(rows[i]["time"]) - origin[i] for i in steps]


@dataclass
class EpochSeries:
    """One value per epoch row; None where the row lacks it (a run stopped before validation)."""

    epoch: list[int] = field(default_factory=list)
    clock_s: list[float | None] = field(default_factory=list)
    val_acc1: list[float | None] = field(default_factory=list)   # 0..1
    train_loss: list[float | None] = field(default_factory=list)
    val_loss: list[float | None] = field(default_factory=list)


def epoch_series(run: RunRecord) -> EpochSeries:
    out = EpochSeries()
    first = next((t for r in run.rows for t in [_num(r.get("time"))] if t is not None), None)
    stamps = [_num(line.get("time")) for line in run.epoch_lines]  # when each epoch line was written
    for n, row in enumerate(run.epochs, 1):
        out.epoch.append(int(_num(row.epoch) or n))
        clock = _num(row.elapsed_s)
        stamp = stamps[n - 1] if n <= len(stamps) else None
        if clock is None and first is not None and stamp is not None:
            clock = stamp - first
        out.clock_s.append(clock)
        out.val_acc1.append(_num(row.val_acc1))
        out.train_loss.append(_num(row.train_loss))
        out.val_loss.append(_num(row.val_loss))
    return out


@dataclass
class StepSeries:
    """One value per logged step (seconds, images/s, bytes); None where a row lacks it."""

    step: list[int] = field(default_factory=list)
    clock_s: list[float] = field(default_factory=list)
    lr: list[float | None] = field(default_factory=list)
    batch: list[int | None] = field(default_factory=list)           # effective: batch size x accumulation
    images_per_s: list[float | None] = field(default_factory=list)  # telemetry's rolling window at that step
    data_wait_s: list[float | None] = field(default_factory=list)   # this batch's parts, seconds
    h2d_s: list[float | None] = field(default_factory=list)
    compute_s: list[float | None] = field(default_factory=list)
    memory_bytes: list[float | None] = field(default_factory=list)
    memory_limit_bytes: float | None = None
    memory_what: str = ""

    @property
    def batch_changed(self) -> bool:
        return len({b for b in self.batch if b}) > 1


def memory_keys(steps: list[dict[str, Any]]) -> tuple[str, str, str]:
    """(value key, limit key, what it is in words): the GPU's allocator on a GPU, else the process's RSS."""
    if any(_num(r.get("gpu_mem_reserved_bytes")) for r in steps):
        return "gpu_mem_reserved_bytes", "gpu_mem_total_bytes", "GPU memory reserved by PyTorch's allocator"
    return "process_rss_bytes", "host_ram_total_bytes", "resident memory (RSS) of the run and its loader workers"


def step_series(run: RunRecord) -> StepSeries:
    clock_at = run.summary.resumed_clock.before_s if run.summary.resumed_clock is not None else None
    steps = [r for r in run.rows if r.get("kind") == "step" and _num(r.get("time")) is not None]
    out = StepSeries(clock_s=step_clock(run.rows, _num(clock_at)))
    value_key, limit_key, out.memory_what = memory_keys(steps)
    limits = [v for r in steps for v in [_num(r.get(limit_key))] if v]
    out.memory_limit_bytes = max(limits) if limits else None
    for n, row in enumerate(steps, 1):
        out.step.append(int(_num(row.get("step")) or n))
        size, accumulation = _num(row.get("batch_size")), _num(row.get("accumulation_steps")) or 1.0
        out.batch.append(int(size * accumulation) if size else None)
        for key in ("lr", "images_per_s", "data_wait_s", "h2d_s", "compute_s"):
            getattr(out, key).append(_num(row.get(key)))
        out.memory_bytes.append(_num(row.get(value_key)))
    return out


def milestones(run: RunRecord) -> list[tuple[float, float, int | None]]:
    """(accuracy 0..1, clock seconds, epoch) of each time-to-accuracy milestone summary.json records."""
    out = []
    for m in run.summary.milestones:
        acc, clock = _num(m.val_acc1), _num(m.elapsed_s)
        if acc is not None and clock is not None:
            epoch = _num(m.epoch)
            out.append((acc, clock, int(epoch) if epoch is not None else None))
    return out


def budget_end_s(run: RunRecord) -> tuple[float, str] | None:
    """(seconds on the run's clock where the time budget ends, its source: --time-budget, --deadline...)."""
    budget = run.summary.time_budget
    seconds = _num(budget.budget_s) if budget is not None else None
    return (seconds, budget.source or "time budget") if seconds and budget is not None else None


def confusion(run: RunRecord) -> list[list[int]] | None:
    """The [true][predicted] counts summary.json keeps (the best epoch's), when square and not empty."""
    matrix = run.summary.confusion_matrix
    if not isinstance(matrix, (list, tuple)) or not matrix or not all(isinstance(r, list) and len(r) == len(matrix)
                                                             for r in matrix):
        return None
    return [[int(_num(v) or 0) for v in row] for row in matrix]
