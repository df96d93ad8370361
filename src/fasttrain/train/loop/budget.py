"""A run defined over a wall-clock budget (`--time-budget`, `--deadline`, `--max-cost`): the schedule ends at the
deadline, not at a guessed epoch count.

The clock starts when the process starts (imports and start-up count, as they do for the user). Out of the time
left, a reserve is kept for what must happen after the last step (the final validation, the last checkpoint, the
summary); the rest is training. How many optimizer steps fit is planned from the forecast's step time, then
re-planned after every step from the recent measured one, with each epoch's own overhead (validation,
checkpoints) spread over its steps; the LR schedule is stretched or shrunk to end at that step, so
the LR reaches its floor at the deadline instead of being cut off mid-schedule (Lightning's `max_time` stops the
run with the LR still high). A budgeted run follows the clock, so two runs are not bit-identical.

Under DDP each rank keeps its own clock, but none decides alone: each step's decision (out of time, the planned
steps, whether the plan is measured yet) rides the stop vote (parallel/ddp.StopVote, read one step later, so a
rank proposes to stop one step ahead) and every rank applies the agreed one at the same step: the stop if any
rank is out of time, the smallest plan. The start and each epoch end agree the same way, with a blocking
collective. The reserve for the end is timed from the sanity validation (budget_reserve.py).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

from fasttrain.train.loop.budget_reserve import SanityTiming, capped_reserve

if TYPE_CHECKING:
    from fasttrain.train.loop.epoch_row import EpochRow
    from fasttrain.train.parallel.ddp import DistContext

# After the last step: the final validation and checkpoint (measured or estimated), then this much for the run
# log, the summary, the run's report.html (drawing its plots: about 1.2 s on the 2-core CPU here) and the
# process's exit (seconds; the rest measured about 1-2 s here with TensorBoard's writer thread).
END_MARGIN_S = 3.0
# The first re-plan waits for this many measured steps (the very first steps pay warm-up).
FIRST_REPLAN_STEPS = 4
T = TypeVar("T")
# "No plan" in a vote whose MAX over -planned is the smallest plan.
NO_PLAN = 2**62


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

    def left_s(self) -> float:
        """Seconds to the deadline."""
        return self.deadline - self.clock()

    def training_left_s(self) -> float:
        """Seconds left for training steps: the time left minus the reserve for the end of the run."""
        return self.deadline - self.clock() - self.end_s - END_MARGIN_S

    def replan(self, steps_done: int, step_s: float, overhead_per_step_s: float) -> int:
        """The optimizer step at which training ends, from the measured step time -> planned_steps."""
        self.planned_steps = steps_done + steps_that_fit(self.training_left_s(), step_s, overhead_per_step_s)
        self.replans += 1
        return self.planned_steps

    def out_of_time(self, steps_done: int, *, by_plan: bool = True, ahead_s: float = 0.0) -> bool:
        """Stop now: the planned steps are done (`by_plan`: a plan from measured steps, not a guess), or the clock
        says so whatever the plan (a machine that slowed); `ahead_s`: what must still fit (a step not yet taken)."""
        planned = by_plan and self.planned_steps is not None and steps_done >= self.planned_steps
        return planned or self.training_left_s() <= ahead_s

    def report(self) -> dict[str, float]:
        """For the summary: the budget, what was used, the margin left (seconds; negative: over)."""
        used = self.used_s()
        return {"budget_s": self.total_s, "used_s": round(used, 2), "margin_s": round(self.total_s - used, 2)}


class Stretchable(Protocol):
    """The LR schedule as the budget sees it (loop/optim.py LRSchedule)."""

    step: int
    total_steps: int

    def replan(self, total_steps: int, *, measured: bool = True) -> None: ...


class Ballot(NamedTuple):
    """A rank's proposal after a step or an epoch: stop (out of time), the step training ends at (None: no plan
    yet), and whether that plan comes from measured step times (else a guess: the forecast's)."""

    out: bool
    planned: int | None
    measured: bool

    def votes(self) -> tuple[int, int, int]:
        """As integers whose MAX over the ranks is their agreement: any out, the smallest plan, any guess."""
        return int(self.out), -(NO_PLAN if self.planned is None else self.planned), int(not self.measured)

    @classmethod
    def from_votes(cls, votes: Sequence[int]) -> Ballot:
        """The agreed ballot from the MAX of every rank's votes(). Pure."""
        out, negated, guess = (int(v) for v in votes)
        return cls(bool(out), None if -negated >= NO_PLAN else -negated, not guess)


class BudgetPace:
    """The budget inside the loop: when to stop, and where the LR schedule ends. The plan is made again after every
    optimizer step from the recent step time (an average that follows a machine that slows or speeds up) and each
    epoch's own overhead (validation, checkpoints) spread over its steps, so however the machine behaves, the
    schedule's end moves with the clock and the LR is at its floor when the time is up.
    `steps_per_epoch`: optimizer steps in a whole epoch; `dist`: a torchrun worker's ranks, which agree."""

    SMOOTHING = 0.1   # weight of the newest step in the average step time (it follows a change within ~10 steps)

    def __init__(self, budget: TimeBudget, schedule: Stretchable, steps_per_epoch: int, *,
                 first_step_s: float | None = None, max_steps: int | None = None,
                 clock: Callable[[], float] = time.perf_counter, dist: DistContext | None = None,
                 reestimate_images: int = 0):
        """`first_step_s`: the forecast's seconds per optimizer step, for the plan before anything is measured;
        `max_steps`: a cap the user gave besides the budget (--epochs), whichever ends first;
        `reestimate_images`: training images each validation re-estimates batch norms on (optim.precise_bn_images)."""
        self.budget, self.schedule, self.steps_per_epoch, self.clock = budget, schedule, max(1, steps_per_epoch), clock
        self.first_step_s, self.max_steps, self.dist = first_step_s, max_steps, dist
        self.reestimate_images = reestimate_images
        self.step_s: float | None = None        # the recent seconds per optimizer step
        self.overhead_per_step_s = 0.0          # the last epoch's overhead over a whole epoch's steps
        self.timing = SanityTiming(clock)       # the sanity validation's batches, for the first reserve
        self._last: tuple[int, float] | None = None
        self._timed = 0                          # step intervals measured (the first of a pass is left out)
        self._measured = False                   # a plan from measured steps was made (a guess never stops a run)
        self._epoch_from = (clock(), 0)          # (clock, steps) where the epoch began: start() or the last end

    def start(self, end_s: float) -> None:
        """Before training: the reserve for the end (final validation + checkpoint, seconds; capped: a guess) and,
        when the forecast gave a step time, the first plan from it (a guess too: it leaves the warm-up alone)."""
        self.budget.end_s = capped_reserve(end_s, self.budget.left_s())
        self._epoch_from = (self.clock(), self.schedule.step)
        planned = self._plan(self.first_step_s) if self.first_step_s else None
        self.settle(self._agree(Ballot(False, planned, False)))

    def timed(self, val_loader: Iterable[T]) -> Iterator[T]:
        """The sanity validation's loader, its batches timed (budget_reserve.SanityTiming)."""
        return self.timing.wrap(val_loader)

    def start_after(self, sanity: dict[str, Any] | None, val_loader: Iterable[Any] | None, write_s: float) -> None:
        """start() with the reserve timed on the sanity validation (budget_reserve.py) plus the final write."""
        self.start(self.timing.reserve_s(sanity, val_loader, self.reestimate_images) + write_s)

    def after_step(self, step: int) -> bool:
        """One process: propose() and settle() at once. -> whether training must stop now."""
        return self.settle(self.propose(step))

    def propose(self, step: int) -> Ballot:
        """After optimizer step `step` (steps taken so far): the step time averaged, the plan made again once a few
        steps are measured -> this rank's ballot. Under DDP the vote applies it one step later, so it proposes
        to stop when the next step would be out of time."""
        now = self.clock()
        if self._last is not None and step > self._last[0]:
            interval = (now - self._last[1]) / (step - self._last[0])
            self._timed += 1
            self.step_s = interval if self.step_s is None else \
                (1 - self.SMOOTHING) * self.step_s + self.SMOOTHING * interval
        self._last = (step, now)
        planned = self.budget.planned_steps
        if self.step_s is not None and self._timed >= FIRST_REPLAN_STEPS - 1:
            planned, self._measured = self._plan(self.step_s), True
        ahead = 1 if self.dist is not None else 0
        out = self.budget.out_of_time(step + ahead, by_plan=self._measured, ahead_s=ahead * (self.step_s or 0.0))
        return Ballot(out, planned, self._measured)

    def settle(self, agreed: Ballot) -> bool:
        """Apply the agreed ballot (in one process, this rank's own): the LR schedule ends at its plan.
        -> whether training stops now."""
        if agreed.planned is not None:
            self.schedule.replan(max(self.schedule.step + 1, agreed.planned), measured=agreed.measured)
        return agreed.out

    def after_epoch(self, train_s: float, steps: int, overhead_s: float, end_s: float) -> bool:
        """At an epoch end: its validation and checkpoint seconds spread over a whole epoch's steps, `end_s` the
        reserve now measured, the plan made again (agreed by every rank). -> whether the budget is spent (this
        was the last epoch)."""
        self.budget.end_s = end_s
        self.overhead_per_step_s = overhead_s / self.steps_per_epoch
        self._last = None  # the next interval would include this epoch's validation
        if self.step_s is None and steps > 0:
            self.step_s = train_s / steps
        planned = self.budget.planned_steps
        if self.step_s is not None:
            planned, self._measured = self._plan(self.step_s), True
        out = self.budget.out_of_time(self.schedule.step, by_plan=self._measured)
        return self.settle(self._agree(Ballot(out, planned, self._measured)))

    def epoch_end(self, row: EpochRow, write_s: float) -> bool:
        """after_epoch() from the epoch's row (train_s, val_s) and the final checkpoint's expected `write_s`; the
        epoch's seconds and steps counted from the last epoch end (its checkpoint write included) or the start.
        -> whether the budget is spent."""
        (since, steps_before), now = self._epoch_from, self.clock()
        self._epoch_from = (now, self.schedule.step)
        train_s = float(row.train_s)
        return self.after_epoch(train_s, self.schedule.step - steps_before, max(0.0, now - since - train_s),
                                float(row.val_s or 0.0) + write_s)

    def _agree(self, ballot: Ballot) -> Ballot:
        """Every rank's ballot at the same point (the start, an epoch end: a blocking collective) -> the agreed
        one; in one process its own. The ranks' schedules must be alike here, else their weights drift apart."""
        if self.dist is None:
            return ballot
        seen = self.dist.gather((ballot.votes(), self.schedule.step, self.schedule.total_steps))
        if len({(step, total) for _, step, total in seen}) > 1:
            raise RuntimeError("time budget: the ranks' LR schedules differ, (step, total steps) by rank: "
                               f"{[(step, total) for _, step, total in seen]}")
        return Ballot.from_votes([max(column) for column in zip(*(votes for votes, _, _ in seen), strict=True)])

    def _plan(self, step_s: float) -> int:
        """The step training ends at, from `step_s` seconds a step (and the cap the user gave)."""
        planned = self.budget.replan(self.schedule.step, step_s, self.overhead_per_step_s)
        if self.max_steps is not None and planned > self.max_steps:
            planned = self.budget.planned_steps = self.max_steps
        return planned
