"""How many compute threads a CPU run should use while other processes take some of the cores: a pure rule with
hysteresis, fed one reading a second (train/trial/thread_follow.py applies it between steps).

Why: torch's CPU kernels split each operation over its threads and wait at a barrier for the slowest. When another
process holds one of the cores a thread is scheduled on, every barrier waits for a descheduled thread: on the
2-core EPYC, two plain torch processes with 2 threads each ran at 0.12 steps/s against 6.18 alone, and at 1.37
with 1 thread each (issue 42). So a run uses the cores the others leave it, rounded half up, never more than its
plan's threads and never fewer than one; it takes threads back when the others stop.

The reading (`others_cores`, telemetry/contention.py HostReader) is the rest of the machine's busy time in cores,
already smoothed over about five seconds, so a reading right after a change still shows the old state: a change
waits SETTLE_READINGS readings before the next one is considered, lowering needs LOWER_AFTER readings in a row that
ask for it (a two-second compile is not a competitor), and raising needs RAISE_AFTER (taking a thread back too
early costs more than keeping one thread a few seconds longer).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

LOWER_AFTER = 2       # readings in a row (about 1 s apart) that ask for fewer threads
RAISE_AFTER = 4       # ... that ask for more
SETTLE_READINGS = 3   # readings ignored after a change: the smoothed figure still shows the state before it


def fair_threads(cores: int, others_cores: float, ceiling: int) -> int:
    """The threads that fit the cores other processes leave: (cores - others) rounded half up, so other work of
    half a core or less (a desktop's background, a terminal) keeps every thread; within 1..ceiling."""
    free = cores - max(0.0, others_cores)
    return max(1, min(ceiling, math.floor(free + 0.5)))


@dataclass(frozen=True)
class ThreadShare:
    """The rule's state: the threads in use, the most the run may use, and the readings counted so far."""

    threads: int
    ceiling: int
    cores: int
    asking_fewer: int = 0   # readings in a row whose fair share was below `threads`
    asking_more: int = 0    # ... above it
    settling: int = 0       # readings still ignored after the last change

    def after(self, others_cores: float | None) -> ThreadShare:
        """The state after one reading (None: not measured, nothing changes); a new `threads` when it changed."""
        if others_cores is None or not math.isfinite(others_cores):
            return self
        if self.settling:
            return replace(self, settling=self.settling - 1, asking_fewer=0, asking_more=0)
        fair = fair_threads(self.cores, others_cores, self.ceiling)
        if fair < self.threads:
            fewer = self.asking_fewer + 1
            if fewer >= LOWER_AFTER:
                return replace(self, threads=fair, asking_fewer=0, asking_more=0, settling=SETTLE_READINGS)
            return replace(self, asking_fewer=fewer, asking_more=0)
        if fair > self.threads:
            more = self.asking_more + 1
            if more >= RAISE_AFTER:
                return replace(self, threads=fair, asking_fewer=0, asking_more=0, settling=SETTLE_READINGS)
            return replace(self, asking_fewer=0, asking_more=more)
        return replace(self, asking_fewer=0, asking_more=0)
