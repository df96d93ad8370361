"""When the loop stops or saves in the middle of an epoch.

A stop request (SIGTERM/SIGINT, resilience.GracefulStop) is honoured once the optimizer step in flight has
closed; the same mid-epoch checkpoint is also written every `save_every_s` seconds. Under DDP both are agreed
through distributed.StopVote, so every rank saves and stops after the same step.
"""
from __future__ import annotations

import time
from typing import Any

from fasttrain.train.signals.resilience import GracefulStop, SignalHook


class StopControl:
    def __init__(self, stop: GracefulStop | None, save_every_s: float | None, dist: Any = None):
        self.stop = stop
        self.save_every_s = save_every_s      # seconds between periodic mid-epoch saves; None: none
        self.dist = dist
        self.signals = SignalHook.from_env()
        self.last_save = time.monotonic()
        self.vote = None
        if dist is not None:
            from fasttrain.train.parallel.ddp import StopVote
            self.vote = StopVote(dist)

    def saved(self) -> None:
        """A checkpoint was just written (or would have been): the periodic save clock starts again."""
        self.last_save = time.monotonic()

    def after_step(self, step: int) -> tuple[bool, bool]:
        """After optimizer step `step` (not the epoch's last) -> (stop now, a periodic save is due)."""
        self.signals.after_step(step)
        stopping = self.stop is not None and self.stop.requested is not None
        due = self.save_every_s is not None and time.monotonic() - self.last_save >= self.save_every_s
        if self.vote is not None:  # every rank acts on the same (stop, due), one step after it was posted
            signal, due = self.vote.exchange(self._signal_seen(), due)
            stopping = self._agreed_stop(signal)
        return stopping, due

    def at_epoch_end(self) -> bool:
        """Whether to stop after this epoch (a signal received during it, on any rank)."""
        stopping = self.stop is not None and self.stop.requested is not None
        if self.dist is not None:
            stopping = self._agreed_stop(self.dist.max(self._signal_seen()))
        return stopping

    def drain(self) -> None:
        """End of a pass: every rank posted the same votes, none may stay in flight."""
        if self.vote is not None:
            self.vote.drain()

    def _signal_seen(self) -> int:
        """The stop signal this rank received itself (0: none), for the vote."""
        return (self.stop.requested or 0) if self.stop is not None else 0

    def _agreed_stop(self, signal: int) -> bool:
        """A rank that received no signal itself stops for the one another rank received."""
        if signal and self.stop is not None and self.stop.requested is None:
            self.stop.requested = signal
        return bool(signal) and self.stop is not None
