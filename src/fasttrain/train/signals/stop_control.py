"""When the loop stops or saves in the middle of an epoch.

A stop request (SIGTERM/SIGINT, lifecycle.GracefulStop) is honoured once the optimizer step in flight has
closed; the same mid-epoch checkpoint is also written every `save_every_s` seconds. A time budget's pace
(loop/budget.py) is asked here too, after the same steps. Under DDP all three are agreed through
parallel/ddp.StopVote, so every rank saves, stops and plans its LR schedule's end at the same step.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from fasttrain.train.loop.budget import Ballot
from fasttrain.train.loop.outcome import Interrupted
from fasttrain.train.signals.lifecycle import GracefulStop
from fasttrain.train.signals.scripted import SignalHook

if TYPE_CHECKING:
    from fasttrain.train.loop.budget import BudgetPace
    from fasttrain.train.parallel.ddp import DistContext, StopVote


class StopControl:
    def __init__(self, stop: GracefulStop | None, save_every_s: float | None, dist: DistContext | None = None,
                 budget: BudgetPace | None = None):
        self.stop = stop
        self.save_every_s = save_every_s      # seconds between periodic mid-epoch saves; None: none
        self.dist = dist
        self.budget = budget                  # a time budget's pace, or None
        self.signals = SignalHook.from_env()
        self.last_save = time.monotonic()
        self.vote: StopVote | None = None
        if dist is not None:
            from fasttrain.train.parallel.ddp import StopVote
            self.vote = StopVote(dist)

    def saved(self) -> None:
        """A checkpoint was just written (or would have been): the periodic save clock starts again."""
        self.last_save = time.monotonic()

    def after_step(self, step: int) -> tuple[bool, bool, bool]:
        """After optimizer step `step` (not the epoch's last) -> (stop now for a signal, a periodic save is due,
        the time budget is spent: this was training's last step)."""
        self.signals.after_step(step)
        stopping = self.stop is not None and self.stop.requested is not None
        due = self.save_every_s is not None and time.monotonic() - self.last_save >= self.save_every_s
        if self.vote is None:
            return stopping, due, self.budget is not None and self.budget.after_step(step)
        # Every rank acts on the same flags and budget plan, one step after they were posted.
        ballot = self.budget.propose(step).votes() if self.budget is not None else ()
        agreed = self.vote.post(self._signal_seen(), int(due), *ballot)
        if agreed is None:  # the pass's first post: nothing agreed yet
            return False, False, False
        spent = self.budget is not None and self.budget.settle(Ballot.from_votes(agreed[2:]))
        return self._agreed_stop(agreed[0]), bool(agreed[1]), spent

    def stop_mid_window(self) -> bool:
        """A stop request to honour before the next micro-step of an open accumulation window: one process only
        (under DDP the ranks vote at optimizer steps, and a window's gradients are not all-reduced yet)."""
        return self.dist is None and self.stop is not None and self.stop.requested is not None

    def at_epoch_end(self) -> bool:
        """Whether to stop after this epoch (a signal received during it, on any rank)."""
        stopping = self.stop is not None and self.stop.requested is not None
        if self.dist is not None:
            stopping = self._agreed_stop(self.dist.max(self._signal_seen()))
        return stopping

    def interrupted(self, checkpoint: Path | None, epoch: int, batch: int, step: int) -> Interrupted:
        """What the loop raises once it honoured the stop request (after the checkpoint at this position)."""
        assert self.stop is not None  # only asked after after_step() or at_epoch_end() said to stop
        return Interrupted(self.stop.name, self.stop.exit_code, checkpoint, epoch, batch, step)

    def drain(self) -> None:
        """End of a pass: every rank posted the same votes, none may stay in flight."""
        if self.vote is not None:
            self.vote.drain()

    def _signal_seen(self) -> int:
        """The stop signal this rank received itself (0: none), for the vote."""
        return (self.stop.requested or 0) if self.stop is not None else 0

    def _agreed_stop(self, signal: int) -> bool:
        """A rank that received no signal itself stops for the one another rank received."""
        if signal and self.stop is not None:
            self.stop.adopt(signal)
        return bool(signal) and self.stop is not None
