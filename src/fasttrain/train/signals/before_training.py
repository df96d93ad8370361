"""A stop signal before training started: one line and an exit code, never a silent 143 or a traceback.

`fasttrain train` spends its first seconds importing, probing the machine, opening the data and building the
model; a SIGTERM (preemption) or Ctrl-C there has nothing to save. cli.py installs its
`_stopped_before_training` handler first thing, before any heavy import (it must cost nothing: a handler
imported from here would wait for this package's imports), when the process is the `fasttrain train` command.
It prints `fasttrain: stopped by SIGTERM before training started; nothing to save` and exits 143 (SIGINT: 130).
disarm() puts the default handlers back just before the trainer's own GracefulStop takes over (resilience.py:
finish the step, save, say how to resume), and before the launcher starts its workers.
"""
from __future__ import annotations

import signal

EARLY_HANDLER = "_stopped_before_training"   # cli.py's handler, known by name (cli.py is above this layer)
DEFAULTS = ((signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.default_int_handler))


def armed() -> bool:
    return any(getattr(signal.getsignal(sig), "__name__", "") == EARLY_HANDLER for sig, _ in DEFAULTS)


def disarm() -> None:
    """Python's default handlers instead of the early one (main thread only; a no-op when it is not armed)."""
    import threading
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, default in DEFAULTS:
        if getattr(signal.getsignal(sig), "__name__", "") == EARLY_HANDLER:
            signal.signal(sig, default)


def _run_finished(signum: int, frame: object) -> None:
    """SIGTERM after the last step: the checkpoint and the run folder are written; finishing the summary is all
    that is left, so the signal is ignored rather than killing the process half-way through it."""


def hold_after_run() -> None:
    """From the end of training to the end of the command (summary, JSON), a SIGTERM (a preemption notice that
    lands just after the last step) no longer kills the process with -15 for a run that finished; the command
    exits as the run did. release_after_run() puts the default back. Main thread only."""
    import threading
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _run_finished)


def release_after_run() -> None:
    import threading
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is _run_finished:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
