"""A busy machine: how much of the CPU (and the GPU) other processes take from the run, and what it costs.

On 2 cores with another process on both, a run went at 58 images/s against 2,687 on the quiet machine and the
verdict still said "compute-bound, the input pipeline keeps up" (issue 25): the step split cannot see a
competitor, because the competitor slows every part alike. What can: the cores' worth of CPU the run's own
processes got against what the whole machine spent (/proc/stat through psutil, steal time included: a
hypervisor's neighbours are other processes too), and on a GPU the other processes NVML lists on it.

`HostReader` is telemetry's host sampler with these readings added; `busy_text()` is the pure rule the verdict,
the dashboard and the summary read.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from fasttrain.telemetry.readers import host_sample, tree_pids

# Other processes using at least this many cores' worth (and a quarter of the cores) make a run's figures the
# machine's, not the run's: half a core is more than a desktop's background (a browser tab, an editor) on 2 cores.
BUSY_MIN_CORES = 0.5
BUSY_MIN_SHARE = 0.25
# The readings are smoothed over about this many samples (1 s apart): a compile or a file copy of a second or two
# is not a busy machine.
SMOOTHING_SAMPLES = 5


def _busy_seconds() -> float | None:
    """CPU seconds the whole machine has spent busy since boot (all cores; steal counted as busy)."""
    try:
        import psutil
        t = psutil.cpu_times()
    except Exception:
        return None
    return sum(getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))


def _tree_seconds() -> float | None:
    """CPU seconds this process and its live children (loader workers) have used."""
    try:
        import psutil
    except ImportError:
        return None
    total = 0.0
    for pid in tree_pids():
        try:
            t = psutil.Process(pid).cpu_times()
        except Exception:
            continue
        total += t.user + t.system
    return total


class HostReader:
    """host_sample() plus `cpu_run_cores` (cores' worth this run's processes used), `cpu_others_cores` (the rest of
    the machine's busy time, in cores) and `load_1m`, each smoothed over about SMOOTHING_SAMPLES calls."""

    def __init__(self) -> None:
        self._last: tuple[float, float, float] | None = None   # (monotonic s, machine busy s, run s)
        self._run: float | None = None
        self._others: float | None = None

    def __call__(self) -> dict[str, Any]:
        out = host_sample()
        busy, ours, now = _busy_seconds(), _tree_seconds(), time.monotonic()
        if busy is not None and ours is not None:
            if self._last is not None and now > self._last[0]:
                dt = now - self._last[0]
                run, others = (
                    (ours - self._last[2]) / dt,
                    max(0.0, (busy - self._last[1]) - (ours - self._last[2])) / dt,
                )
                self._run, self._others = _smooth(self._run, run), _smooth(self._others, others)
            self._last = (now, busy, ours)
        if self._others is not None:
            out["cpu_run_cores"], out["cpu_others_cores"] = self._run, self._others
        with contextlib.suppress(OSError, AttributeError):
            out["load_1m"] = os.getloadavg()[0]
        return out


def _smooth(old: float | None, new: float) -> float:
    return new if old is None else old + (new - old) / SMOOTHING_SAMPLES


def busy_text(snapshot: dict[str, Any], cores: int | None, planned_cores: float | None) -> str | None:
    """`busy machine: other processes use 1.9 of the 2 cores (load 3.1); this run got 0.9 of the 2 cores it
    planned for, about 2.2x slower than alone`, or None on a quiet machine. `planned_cores`: the cores' worth
    the run was planned to use (compute threads plus loader workers, at most the cores). Pure."""
    parts: list[str] = []
    others = snapshot.get("cpu_others_cores")
    if cores and others is not None and others >= max(BUSY_MIN_CORES, BUSY_MIN_SHARE * cores):
        load = snapshot.get("load_1m")
        text = f"other processes use {min(others, cores):.1f} of the {cores} cores" + (
            f" (load {load:.2f})" if load is not None else ""
        )
        run = snapshot.get("cpu_run_cores")
        if run is not None and planned_cores and run < 0.9 * planned_cores:
            slower = planned_cores / max(run, 0.05)
            text += (
                f"; this run got {run:.1f} of the {planned_cores:g} cores it planned for, about {slower:.1f}x "
                "slower than alone or more (threads that wait on each other lose more)"
            )
        threads = snapshot.get("cpu_threads")   # thread_follow.py's: what the run uses now
        if threads is not None:
            text += f"; computing on {threads} thread{'s' if threads != 1 else ''} meanwhile"
        parts.append(text)
    gpu_others = snapshot.get("gpu_other_processes")
    if gpu_others:
        parts.append(
            f"{gpu_others} other process{'es' if gpu_others > 1 else ''} on the GPU share its time"
            + (f" (busy {snapshot['gpu_util_pct']:.0f}%)" if snapshot.get("gpu_util_pct") is not None else "")
        )
    if not parts:
        return None
    return (
        "busy machine: " + "; ".join(parts) + ": these figures are not this run's own; measure again when it is quiet"
    )
