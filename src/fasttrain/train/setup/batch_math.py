"""The arithmetic of `--batch-size auto`, pure (no torch): search for the largest batch that runs, keep the
effective batch through accumulation, and say what was found.

`search_largest_batch(try_batch, ...)` grows the batch by doubling from a start until a size fails, bisects
between the largest success and the smallest failure, then takes a safety margin off and *runs that size
too*, so the answer is always a size that was seen to work. batch_search.py runs the trials on the device.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from fasttrain.core import arithmetic as ar
from fasttrain.core.errors import JobFailed

# Fraction taken off the largest size that ran. The search runs on random tensors for two steps; a real run
# also meets allocator fragmentation after hours, cuDNN workspaces that vary with the algorithm picked,
# variable-size last batches, a validation pass and other processes on the GPU. 10% is the usual headroom.
SAFETY_MARGIN = 0.10
# Bisection stops when the gap between the largest success and the smallest failure is within this fraction
# of the success (or 1): finer steps cost a trial each and the margin removes more than this anyway.
BISECT_TOLERANCE = 0.02
# Hard cap on trials: doubling from 1 to 65,536 is 17, bisecting to 2% ~6, the margin check 1.
MAX_TRIALS = 32
# Without a device memory limit (CPU) the search stops here: larger batches only use more host RAM.
DEFAULT_MAX_BATCH = 4096

TrialFn = Callable[[int], "Trial"]


@dataclass
class Trial:
    """One attempt at a batch size: ran (ok) or ran out of memory (ok=False, reason)."""

    batch: int
    ok: bool
    reason: str = ""
    seconds: float = 0.0
    peak_memory_bytes: int | None = None
    images_per_s: float | None = None


@dataclass
class SearchResult:
    batch: int                      # the answer: largest_ok minus the margin, and itself a successful trial
    largest_ok: int                 # largest size that ran
    smallest_failed: int | None     # smallest size that ran out of memory (None: never failed, capped)
    margin: float
    trials: list[Trial] = field(default_factory=list)
    capped_by: str | None = None    # "max_batch" | "max_trials" when the search stopped before an OOM
    from_cache: bool = False
    key: str = ""

    @property
    def tried(self) -> list[int]:
        return [t.batch for t in self.trials]

    @property
    def succeeded(self) -> list[int]:
        return [t.batch for t in self.trials if t.ok]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tried": self.tried, "succeeded": self.succeeded}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchResult:
        trials = [Trial(**t) for t in data.get("trials", [])]
        keep = {f.name for f in dataclasses.fields(cls)} - {"trials"}
        return cls(**{k: v for k, v in data.items() if k in keep}, trials=trials)


class _Runner:
    """Memoised trials: a size is never run twice, and every run is recorded in order."""

    def __init__(self, try_batch: TrialFn, max_trials: int):
        self.try_batch = try_batch
        self.max_trials = max_trials
        self.trials: list[Trial] = []
        self.seen: dict[int, Trial] = {}

    @property
    def exhausted(self) -> bool:
        return len(self.trials) >= self.max_trials

    def ok(self, batch: int) -> bool:
        if batch not in self.seen:
            trial = self.try_batch(batch)
            self.trials.append(trial)
            self.seen[batch] = trial
        return self.seen[batch].ok


def search_largest_batch(try_batch: TrialFn, *, start: int = 1, max_batch: int = DEFAULT_MAX_BATCH,
                         margin: float = SAFETY_MARGIN, max_trials: int = MAX_TRIALS,
                         tolerance: float = BISECT_TOLERANCE) -> SearchResult:
    """Grow by doubling from `start` (or halve while it fails), bisect, take `margin` off and confirm it runs.

    `try_batch(n)` runs one full training step at batch n and returns a Trial. The returned `batch` is always
    one of the sizes that ran successfully; no size is tried twice; at most `max_trials` trials run.
    Raises JobFailed when even batch 1 does not fit.
    """
    if not 0 <= margin < 1:
        raise ValueError("margin must be in [0, 1)")
    run = _Runner(try_batch, max_trials)
    size = max(1, min(start, max_batch))
    lo, hi, capped = 0, None, None          # lo: largest success, hi: smallest failure
    if run.ok(size):
        lo = size
        while hi is None:
            if lo >= max_batch:
                capped = "max_batch"
                break
            if run.exhausted:
                capped = "max_trials"
                break
            nxt = min(lo * 2, max_batch)
            if run.ok(nxt):
                lo = nxt
            else:
                hi = nxt
    else:
        hi = size
        while lo == 0:
            if hi == 1:
                raise JobFailed("even a batch of 1 runs out of memory: " + run.seen[1].reason +
                                "; use a smaller model or image size, bf16/fp16 precision or activation checkpointing")
            if run.exhausted:
                raise JobFailed(f"no batch size fitted in {max_trials} trials (tried {sorted(run.seen)})")
            nxt = max(1, hi // 2)
            if run.ok(nxt):
                lo = nxt
            else:
                hi = nxt
    while hi is not None and hi - lo > max(1, math.floor(lo * tolerance)) and not run.exhausted:
        mid = (lo + hi) // 2
        if run.ok(mid):
            lo = mid
        else:
            hi = mid
    if hi is not None and hi - lo > max(1, math.floor(lo * tolerance)):
        capped = "max_trials"
    # No size failed below the cap: there is no limit to keep a margin from, the cap itself ran.
    answer = lo if capped == "max_batch" else _confirmed_margin(run, lo, margin)
    return SearchResult(batch=answer, largest_ok=lo, smallest_failed=hi, margin=margin, trials=run.trials,
                        capped_by=capped)


def _confirmed_margin(run: _Runner, largest_ok: int, margin: float) -> int:
    """The margin target, run once to be sure; if it fails (memory is not monotone in the batch, e.g. a
    different conv algorithm), step down by the margin again; past the trial cap, the largest success below."""
    target = max(1, math.floor(largest_ok * (1 - margin)))
    while True:
        if target in run.seen and run.seen[target].ok:
            return target
        if target not in run.seen and not run.exhausted and run.ok(target):
            return target
        below = [b for b in run.seen if run.seen[b].ok and b < target]
        if run.exhausted or target == 1:
            if below:
                return max(below)
            raise JobFailed(f"no size under the safety margin ran (tried {sorted(run.seen)})")
        target = max(1, math.floor(target * (1 - max(margin, 0.1))))


# -- accumulation ------------------------------------------------------------------------------------
def batch_and_accumulation(target_per_device: int, fitting: int) -> tuple[int, int]:
    """Per-device batch and accumulation steps that keep `target_per_device` samples per optimizer step when
    only `fitting` fit: accumulation = ceil(target / fitting), batch = ceil(target / accumulation) <= fitting.
    The product may exceed the target by less than one sample per accumulation step (256 with 100 fitting:
    3 x 86 = 258); the caller scales the LR for what it really is."""
    if target_per_device <= fitting:
        return target_per_device, 1
    accumulation = ar.accumulation_for(target_per_device, fitting)
    return math.ceil(target_per_device / accumulation), accumulation


def explain(result: SearchResult, batch: int, accumulation: int, target: int, world: int,
            asked: tuple[int, int] | None = None) -> str:
    """One or two sentences: what was found, how, and what the effective batch became. `asked`: the profile's
    (batch, accumulation), named when auto changed them."""
    effective = batch * accumulation * world
    was = (f" (the profile asked {asked[0]} x {asked[1]} accumulation)"
           if asked is not None and asked != (batch, accumulation) else "")
    where = "cached result" if result.from_cache else f"{len(result.trials)} trials"
    if result.capped_by == "max_batch":
        head = (f"batch auto: every size up to the cap {result.largest_ok} ran, no memory limit reached, so "
                f"{result.batch} fits ({where}). ")
    else:
        found = (f"largest that ran {result.largest_ok} (trial cap reached)" if result.capped_by == "max_trials" else
                 f"largest that ran {result.largest_ok}, {result.smallest_failed} ran out of memory")
        head = f"batch auto: {found}; with a {result.margin:.0%} safety margin {result.batch} fits ({where}). "
    if accumulation > 1:
        tail = (f"Using batch {batch} x {accumulation} accumulation steps x {world} devices = effective batch "
                f"{effective} to keep the profile's {target}.")
    elif batch < result.batch:
        tail = (f"Using the profile's batch {batch} (effective {effective}): it fits, so the effective batch is kept; "
                f"set loader.batch_size up to {result.batch} to use the headroom.")
    else:
        tail = f"Using batch {batch} (effective {effective})."
    if was:
        tail = tail.rstrip(".") + was + "."
    if effective != target:
        tail += f" The effective batch differs from the profile's {target}; the LR is scaled for {effective}."
    return head + tail


# A batch fitted to a small data set leaves the epoch at least this many optimizer steps (or the smallest batch).
MIN_STEPS_PER_EPOCH = 4
# The smallest batch a fit halves to: batch norm in training mode cannot normalise one value per channel (resnet18's
# last stage at 32 px is 1x1), so a batch of 1 stops the first step with a ValueError.
MIN_FITTED_BATCH = 2


def fitted_to_data(batch: int, train_size: int, world_size: int = 1) -> int | None:
    """The preset's batch halved until the training samples hold MIN_STEPS_PER_EPOCH full batches per process (or
    the batch is MIN_FITTED_BATCH, or 1 when a process has a single sample); None when no process has a sample.
    Pure."""
    share = train_size // max(world_size, 1)
    if share < 1:
        return None
    floor = MIN_FITTED_BATCH if share >= MIN_FITTED_BATCH else 1
    while batch > floor and share // batch < MIN_STEPS_PER_EPOCH:
        batch = max(floor, batch // 2)
    return batch
