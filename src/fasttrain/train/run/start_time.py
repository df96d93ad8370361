"""When the run started: the moment its clock (time to accuracy, run_clock.py) and a time budget count from.

That is when the command the user ran started, its imports and start-up included: this process's start, or in a
torchrun worker the launcher's (parallel/launch.py hands it on), read from the kernel rather than psutil's
whole-second boot time.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

from fasttrain.train.types import WorkerWorld


def process_started_at(pid: int | None = None) -> float:
    """time.time() when this process (or process `pid`) started (its imports and start-up count in time to accuracy
    and in a time budget). On Linux from the process's age on the boot clock (process_age_s); psutil's create_time
    adds the boot time, which the kernel gives in whole seconds: on this project's VM it put the start 0.76 s too
    early."""
    import time
    try:
        with open(f"/proc/{pid or 'self'}/stat", encoding="ascii") as stat, \
                open("/proc/uptime", encoding="ascii") as up:
            age = process_age_s(stat.read(), up.read(), os.sysconf("SC_CLK_TCK"))
        if age is not None:
            return time.time() - age
    except (OSError, ValueError, AttributeError):
        pass
    import psutil
    return float(psutil.Process(pid).create_time())


def run_started_at(world: WorkerWorld | None, env: Mapping[str, str] | None = None) -> float:
    """time.time() the run's clock starts from: when the command the user ran started. This process's start, or
    in a torchrun worker the launcher's: `fasttrain train --nproc-per-node` hands its start to the workers
    (launch.LAUNCHED_AT_ENV); under a plain `torchrun` it is the start of torchrun's agent, the worker's parent
    (TORCHELASTIC_RUN_ID says the agent started it). The ranks of a job then count from nearly the same moment."""
    import contextlib
    import math
    import time

    from fasttrain.train.parallel.launch import LAUNCHED_AT_ENV
    env = os.environ if env is None else env
    if world is None:
        return process_started_at()
    try:
        given = float(env.get(LAUNCHED_AT_ENV, "nan"))
    except ValueError:
        given = math.nan
    if math.isfinite(given) and given <= time.time():
        return given
    if "TORCHELASTIC_RUN_ID" in env:
        with contextlib.suppress(Exception):  # the parent's start unreadable: this process's
            return min(process_started_at(os.getppid()), process_started_at())
    return process_started_at()


def process_age_s(stat: str, uptime: str, ticks_per_s: int) -> float | None:
    """Seconds since the process started, from /proc/self/stat (field 22: start time in clock ticks after boot)
    and /proc/uptime (seconds after boot, 10 ms resolution); None when they do not parse or disagree. Pure."""
    try:
        fields = stat[stat.rindex(")") + 2:].split()  # the name in parentheses may hold spaces and ')'
        started = int(fields[19]) / ticks_per_s         # field 22 of the whole line
        age = float(uptime.split()[0]) - started
    except (ValueError, IndexError, ZeroDivisionError):
        return None
    return age if age >= 0 else None
