"""SIGTERM and SIGINT in a `fasttrain train` process: one lifecycle, three phases, one place.

  before training  `fasttrain train` spends its first seconds importing, probing, opening the data and building
                   the model: a signal there has nothing to save, so it prints one line and exits 143 (SIGTERM)
                   or 130 (SIGINT). cli.py arms this first thing, before any heavy import (the handler must cost
                   nothing: this module imports only the standard library).
  during training  GracefulStop: SIGTERM (a preemption notice, ~30 s) and the first SIGINT only set a flag; the
                   loop finishes the optimizer step in flight, writes a checkpoint and stops (stop_control.py).
                   A second SIGINT stops at once (KeyboardInterrupt, exit 130, no checkpoint).
  after training   the checkpoint and the run folder are written; a SIGTERM that lands now (a preemption notice
                   just after the last step) is ignored until the command has printed its summary, so a finished
                   run does not end as killed (-15).
The launcher of a multi-process job leaves the signals to torch.distributed.run (its agent forwards them).
Handlers are only ever changed in the main thread.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

EXIT_SIGINT = 130
# What signal.signal() takes and returns: a handler, SIG_DFL / SIG_IGN, or None (set outside Python)
Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None
SIGNAL_NAMES: dict[int, str] = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}
_DEFAULTS = ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler))


def _main_thread() -> bool:
    import threading  # here, not at the top: cli.py arms the first phase before anything it does not need
    return threading.current_thread() is threading.main_thread()


def stopped_before_training(signum: int, frame: FrameType | None) -> None:
    """The before-training handler: what was printed so far, one line, and the exit code of the signal."""
    with contextlib.suppress(Exception):
        sys.stdout.flush()  # may fail when interrupted mid-write
    name = SIGNAL_NAMES.get(signum, str(signum))
    os.write(2, f"fasttrain: stopped by {name} before training started; nothing to save\n".encode())
    os._exit(EXIT_SIGINT if signum == signal.SIGINT else 128 + signum)  # 143: terminated, not a success


def _finished(signum: int, frame: FrameType | None) -> None:
    """After training: the checkpoint and the run folder are written, only the summary is left to print."""


class TrainSignals:
    """The phases of one `fasttrain train` process, in order; each is a no-op off the main thread."""

    def before_training(self) -> None:
        """Armed by cli.py before any heavy import: nothing to save yet."""
        if _main_thread():
            for sig, _ in _DEFAULTS:
                signal.signal(sig, stopped_before_training)

    def hand_over(self) -> None:
        """Python's default handlers instead of the before-training one, just before GracefulStop (entered
        around fit()) or the launcher's agent takes over."""
        if _main_thread():
            for sig, default in _DEFAULTS:
                if signal.getsignal(sig) is stopped_before_training:
                    signal.signal(sig, default)

    def after_training(self) -> None:
        """From the end of training to the end of the command, a late SIGTERM is ignored."""
        if _main_thread():
            signal.signal(signal.SIGTERM, _finished)

    def command_done(self) -> None:
        """The command has said everything: SIGTERM kills again."""
        if _main_thread() and signal.getsignal(signal.SIGTERM) is _finished:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)


train_signals = TrainSignals()


class GracefulStop:
    """Context manager: `requested` is the first signal number received (None until then)."""

    def __init__(self) -> None:
        self.requested: int | None = None
        self._owner = os.getpid()
        self._previous: dict[int, Handler] = {}  # each signal's handler before this one

    def __enter__(self) -> GracefulStop:
        if _main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._owner:
            return  # a forked DataLoader worker inherited this handler: the main process decides
        if self.requested is not None and signum == signal.SIGINT:
            self.__exit__()
            raise KeyboardInterrupt  # second Ctrl-C: stop now, no checkpoint
        if self.requested is None:
            self.requested = signum

    def adopt(self, signum: int) -> None:
        """Data-parallel: stop for a signal another rank received (the first one counts, as here)."""
        if self.requested is None:
            self.requested = signum

    @property
    def name(self) -> str:
        return SIGNAL_NAMES.get(self.requested, str(self.requested)) if self.requested else ""

    @property
    def exit_code(self) -> int:
        return EXIT_SIGINT if self.requested == signal.SIGINT else 0
