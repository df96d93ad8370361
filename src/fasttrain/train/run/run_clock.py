"""The run's clock across a stop and a resume: each epoch row's `elapsed_s` (and so the time to accuracy) counts the
time the run trained before the stop, not the time it stood stopped, and not from zero again.

A checkpoint keeps `clock_s` (seconds on the run's clock when it was written) and `saved_at` (time.time() then). A
resumed process starts its clock at `clock_s` (the time after that checkpoint and before the stop, which the resume
trains again, is not counted twice), and `stopped_s` says how long the run stood between the checkpoint and this
command's start. A checkpoint written before fasttrain kept the clock gives its last epoch row's `elapsed_s`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fasttrain.train.run.summary_parts import ResumedClock

if TYPE_CHECKING:
    from fasttrain.train.state.run_state import Resume


@dataclass(frozen=True)
class RunClock:
    launched_at: float              # time.time() this command's clock starts from
    before_s: float = 0.0           # seconds on the run's clock at the checkpoint this process resumed from
    stopped_s: float | None = None  # seconds from that checkpoint's write to this command's start; None: unknown

    @property
    def origin(self) -> float:
        """time.time() the run's clock reads 0 at, as if it had never stopped."""
        return self.launched_at - self.before_s

    def now_s(self, now: float | None = None) -> float:
        """Seconds on the run's clock now."""
        return (time.time() if now is None else now) - self.origin

    def report(self) -> ResumedClock | None:
        """For summary.json (`resumed_clock`): the clock at the resume and now, the stop's length; None for a run
        that was not resumed."""
        if not self.before_s and self.stopped_s is None:
            return None
        stopped = round(self.stopped_s, 1) if self.stopped_s is not None else None
        return ResumedClock(before_s=round(self.before_s, 3), run_s=round(self.now_s(), 3), stopped_s=stopped)


def resumed_clock(resume: Resume | None, launched_at: float) -> RunClock:
    """The clock of a run started at `launched_at`, continuing `resume`'s (None: a new run's, from 0). Pure."""
    if resume is None:
        return RunClock(launched_at)
    extras = resume.state.extras
    before = extras.clock_s
    if before is None:  # written before the clock was kept: the last epoch row's own time
        before = next((row.elapsed_s for row in reversed(resume.state.fit.history) if row.elapsed_s is not None),
                      None)
    stopped = max(0.0, launched_at - extras.saved_at) if extras.saved_at is not None else None
    return RunClock(launched_at, max(0.0, float(before or 0.0)), stopped)
