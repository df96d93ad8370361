"""Signals sent at a scripted optimizer step: test hooks, so tests decide where a signal lands without racing
a clock (read once, before training; a bad value is a UserError, exit 2, never a ValueError mid-run).

  FASTTRAIN_TEST_SIGNAL_AT_STEP=N    send this process a real signal right after optimizer step N
  FASTTRAIN_TEST_SIGNALS=TERM|INT,.. which ones (default TERM; "INT,INT" is a double Ctrl-C)
  FASTTRAIN_TEST_SIGNAL_GROUP=1      send it to the whole process group (workers too), as a terminal's Ctrl-C does
  FASTTRAIN_TEST_SIGNAL_RANK=R       only in the torchrun worker of global rank R (the others must follow it)
"""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass, field

from fasttrain.core.errors import Problem, UserError


def _hook_int(name: str) -> int | None:
    """A test hook's whole number >= 0 from the environment; None when unset; anything else is a UserError."""
    text = os.environ.get(name, "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise UserError([Problem(name, "must be a whole number, 0 or more (a test hook)", "unset it", text)])
    return int(text)


@dataclass
class SignalHook:
    """FASTTRAIN_TEST_SIGNAL_AT_STEP / FASTTRAIN_TEST_SIGNALS (see module docstring)."""

    at_step: int | None = None
    signals: list[int] = field(default_factory=list)
    group: bool = False

    @classmethod
    def from_env(cls) -> SignalHook:
        """Read once, before training; a bad value is a UserError (exit 2), never a ValueError mid-run."""
        at = _hook_int("FASTTRAIN_TEST_SIGNAL_AT_STEP")
        only_rank = _hook_int("FASTTRAIN_TEST_SIGNAL_RANK")
        if at is None or (only_rank is not None and only_rank != int(os.environ.get("RANK", "0") or 0)):
            return cls()
        text = os.environ.get("FASTTRAIN_TEST_SIGNALS", "TERM")
        names = [n.strip().upper() for n in text.split(",") if n.strip()]
        if not names or any(n not in ("TERM", "INT") for n in names):
            raise UserError([Problem("FASTTRAIN_TEST_SIGNALS", "must be TERM, INT or a comma-separated list of them "
                                     "(a test hook)", "unset it", text)])
        group = os.environ.get("FASTTRAIN_TEST_SIGNAL_GROUP", "0").strip()
        if group not in ("", "0", "1"):
            raise UserError([Problem("FASTTRAIN_TEST_SIGNAL_GROUP", "must be 0 or 1 (a test hook)", "unset it", group)])
        return cls(at, [getattr(signal, "SIG" + n) for n in names], group == "1")

    def after_step(self, step: int) -> None:
        if self.at_step is not None and step == self.at_step:
            for sig in self.signals:
                if self.group:
                    os.killpg(os.getpgid(0), sig)
                else:
                    os.kill(os.getpid(), sig)
