"""A run defined over a wall-clock budget (`--time-budget`, `--deadline`, `--max-cost`): the schedule ends at the
deadline, not at a guessed epoch count.

The clock starts when the process starts (imports and start-up count, as they do for the user). Out of the time
left, a reserve is kept for what must happen after the last step (the final validation, the last checkpoint, the
summary); the rest is training. How many optimizer steps fit is planned from the forecast's step time, then
re-planned after every step from the recent measured one, with each epoch's own overhead (validation,
checkpoints) spread over its steps; the LR schedule is stretched or shrunk to end at that step, so
the LR reaches its floor at the deadline instead of being cut off mid-schedule (Lightning's `max_time` stops the
run with the LR still high). A budgeted run follows the clock, so two runs are not bit-identical.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

# After the last step: the final validation and checkpoint (measured or estimated), then this much for the run
# log, the summary and the process's exit (seconds; measured about 1-2 s here with TensorBoard's writer thread).
END_MARGIN_S = 1.5
# The first re-plan waits for this many measured steps (the very first steps pay warm-up).
FIRST_REPLAN_STEPS = 4


def steps_that_fit(time_left_s: float, step_s: float, overhead_per_step_s: float = 0.0) -> int:
    """Optimizer steps that fit in `time_left_s` at `step_s` seconds each plus each step's share of the per-epoch
    overhead (validation and checkpoints divided by the steps of an epoch). Pure."""
    per_step = max(step_s + overhead_per_step_s, 1e-9)
    return max(0, math.floor(time_left_s / per_step))


@dataclass
class TimeBudget:
    """The budget of one process of a run. `total_s`: the whole budget; `used_before_s`: what earlier processes of
    the same run used (a resume continues with the rest); `launched_at`: time.time() at this process's start."""

    total_s: float
    launched_at: float
    used_before_s: float = 0.0
    clock: Callable[[], float] = time.time
    end_s: float = 0.0              # measured or estimated cost of the final validation + checkpoint
    planned_steps: int | None = None
    replans: int = field(default=0)

    @property
    def deadline(self) -> float:
        """time.time() by which the command must have finished."""
        return self.launched_at + self.total_s - self.used_before_s

    def used_s(self) -> float:
        """Seconds of the budget used so far, by every process of the run."""
        return self.used_before_s + (self.clock() - self.launched_at)

    def training_left_s(self) -> float:
        """Seconds left for training steps: the time left minus the reserve for the end of the run."""
        return self.deadline - self.clock() - self.end_s - END_MARGIN_S

    def replan(self, steps_done: int, step_s: float, overhead_per_step_s: float) -> int:
        """The optimizer step at which training ends, from the measured step time -> planned_steps."""
        self.planned_steps = steps_done + steps_that_fit(self.training_left_s(), step_s, overhead_per_step_s)
        self.replans += 1
        return self.planned_steps

    def out_of_time(self, steps_done: int) -> bool:
        """Stop now: the planned steps are done, or the clock says so whatever the plan (a machine that slowed)."""
        planned = self.planned_steps is not None and steps_done >= self.planned_steps
        return planned or self.training_left_s() <= 0

    def report(self) -> dict[str, float]:
        """For the summary: the budget, what was used, the margin left (seconds; negative: over)."""
        used = self.used_s()
        return {"budget_s": self.total_s, "used_s": round(used, 2), "margin_s": round(self.total_s - used, 2)}


class Stretchable(Protocol):
    """The LR schedule as the budget sees it (loop/optim.py LRSchedule)."""

    step: int

    def replan(self, total_steps: int) -> None: ...


class BudgetPace:
    """The budget inside the loop: when to stop, and where the LR schedule ends. The plan is made again after every
    optimizer step from the recent step time (an average that follows a machine that slows or speeds up) and each
    epoch's own overhead (validation, checkpoints) spread over its steps, so however the machine behaves, the
    schedule's end moves with the clock and the LR is at its floor when the time is up.
    `steps_per_epoch`: optimizer steps in a whole epoch."""

    SMOOTHING = 0.1   # weight of the newest step in the average step time (it follows a change within ~10 steps)

    def __init__(self, budget: TimeBudget, schedule: Stretchable, steps_per_epoch: int, *,
                 first_step_s: float | None = None, max_steps: int | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        """`first_step_s`: the forecast's seconds per optimizer step, for the plan before anything is measured;
        `max_steps`: a cap the user gave besides the budget (--epochs), whichever ends first."""
        self.budget, self.schedule, self.steps_per_epoch, self.clock = budget, schedule, max(1, steps_per_epoch), clock
        self.first_step_s, self.max_steps = first_step_s, max_steps
        self.step_s: float | None = None        # the recent seconds per optimizer step
        self.overhead_per_step_s = 0.0          # the last epoch's overhead over a whole epoch's steps
        self._last: tuple[int, float] | None = None
        self._timed = 0                          # step intervals measured (the first of a pass is left out)

    def start(self, end_s: float) -> None:
        """Before training: the reserve for the end (final validation + checkpoint, seconds) and, when the
        forecast gave a step time, the first plan from it."""
        self.budget.end_s = end_s
        if self.first_step_s:
            self._plan(self.first_step_s)

    def after_step(self, step: int) -> bool:
        """After optimizer step `step` (steps taken so far): the step time averaged, the plan made again once a few
        steps are measured. -> whether training must stop now."""
        now = self.clock()
        if self._last is not None and step > self._last[0]:
            interval = (now - self._last[1]) / (step - self._last[0])
            self._timed += 1
            self.step_s = interval if self.step_s is None else \
                (1 - self.SMOOTHING) * self.step_s + self.SMOOTHING * interval
        self._last = (step, now)
        if self.step_s is not None and self._timed >= FIRST_REPLAN_STEPS - 1:
            self._plan(self.step_s)
        return self.budget.out_of_time(step)

    def after_epoch(self, train_s: float, steps: int, overhead_s: float, end_s: float) -> bool:
        """At an epoch end: its validation and checkpoint seconds spread over a whole epoch's steps, `end_s` the
        reserve now measured, the plan made again. -> whether the budget is spent (this was the last epoch)."""
        self.budget.end_s = end_s
        self.overhead_per_step_s = overhead_s / self.steps_per_epoch
        self._last = None  # the next interval would include this epoch's validation
        if self.step_s is None and steps > 0:
            self.step_s = train_s / steps
        if self.step_s is not None:
            self._plan(self.step_s)
        return self.budget.out_of_time(self.schedule.step)

    def _plan(self, step_s: float) -> None:
        planned = self.budget.replan(self.schedule.step, step_s, self.overhead_per_step_s)
        if self.max_steps is not None and planned > self.max_steps:
            planned = self.budget.planned_steps = self.max_steps
        self.schedule.replan(max(self.schedule.step + 1, planned))
