"""An A/B of one setting over a run's first real steps: the steps train as usual, each one under an arm of the
setting in turn, timed from one batch request to the next (data wait included); the faster median wins for the
rest of the run (tuning/decide.pick_arm). When two steps of each arm already show one clearly slower
(decide.ab_settled), it stops there. The measurement costs only the slower arm's extra time on a handful of
steps, which is why a run too short for the tuning trial can still afford it.

Two settings use it (a Trainer step hook, LoopOptions.before_step): compute threads against loader workers
(thread_ab.py) and, on a CPU, bf16 autocast against fp32 (precision_ab.py). `in_turn` runs several A/Bs one after
the other.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from fasttrain.tuning import decide


class StepAB:
    """A Trainer step hook: call it with the batch index before each step. `use(arm)` switches the setting;
    `on_done(best, ratio, samples)` hears the result once, after `use(best)`. The first arm is the plan's: another
    replaces it only when its median step is faster by more than `margin`."""

    def __init__(self, arms: list[Any], use: Callable[[Any], None],
                 on_done: Callable[[Any, float, dict[Any, list[float]]], None], *, warm_each: int = 0,
                 margin: float = decide.KEEP_MARGIN, clock: Callable[[], float] = time.perf_counter):
        self.schedule, self.untimed = decide.ab_schedule(arms, warm_each=warm_each)
        self.arms, self.use, self.on_done, self.clock, self.margin = arms, use, on_done, clock, margin
        self.samples: dict[Any, list[float]] = {a: [] for a in arms}
        self.step = 0
        self.started: float | None = None
        self.done = False

    def __call__(self, batch_index: int) -> None:
        if self.done:
            return
        now = self.clock()
        if self.started is not None and self.step > self.untimed:  # the step that just ended was timed
            self.samples[self.schedule[self.step - 1]].append(now - self.started)
        if self.step == len(self.schedule) or decide.ab_settled(self.samples):
            self.done = True
            best, ratio = decide.pick_arm(self.samples, current=self.arms[0], margin=self.margin)
            self.use(best)
            self.on_done(best, ratio, self.samples)
            return
        self.use(self.schedule[self.step])
        self.step += 1
        self.started = now


class StepHook(Protocol):
    """What LoopOptions.before_step calls with the batch index; `done`: it has nothing more to do."""

    done: bool

    def __call__(self, batch_index: int) -> None: ...


class InTurn:
    """Several step hooks one after another: each starts at the step after the one before it is done (a hook that
    is never done, thread_follow.py's, comes last)."""

    def __init__(self, hooks: list[StepHook]):
        self.hooks = hooks

    @property
    def done(self) -> bool:
        return all(h.done for h in self.hooks)

    def __call__(self, batch_index: int) -> None:
        for hook in self.hooks:
            if not hook.done:
                hook(batch_index)
                if not hook.done:
                    return  # it timed this step; the next A/B waits


def in_turn(*hooks: StepHook | None) -> Callable[[int], None] | None:
    """The hooks that are wanted (None: not wanted), run in turn; None when there is none."""
    wanted = [h for h in hooks if h is not None]
    if not wanted:
        return None
    return wanted[0] if len(wanted) == 1 else InTurn(wanted)
