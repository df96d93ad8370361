"""What keeps a run alive or lets it stop cleanly: signals and non-finite steps (out of memory: oom.py).

- GracefulStop: SIGTERM (preemption: ~30 s warning) and the first SIGINT only set a flag; the loop finishes
  the optimizer step in flight, writes a checkpoint and stops. A second SIGINT stops at once
  (KeyboardInterrupt, exit 130, no checkpoint). Handlers go in only in the main thread and are restored after.
  DataLoader workers receive the same signals (one process group): they ignore them and leave the stopping
  to the main process, which shuts them down (no worker tracebacks).
- Test hooks (env, read once): FASTTRAIN_TEST_SIGNAL_AT_STEP=N sends this process a real signal
  (FASTTRAIN_TEST_SIGNALS, default TERM; e.g. "INT,INT" for a double Ctrl-C) right after optimizer step N,
  so tests decide where a signal lands without racing a clock; FASTTRAIN_TEST_SIGNAL_GROUP=1 sends it to the
  whole process group (workers included), as a terminal's Ctrl-C or a group-wide kill does;
  FASTTRAIN_TEST_SIGNAL_RANK=R fires only in the torchrun worker of global rank R (the others must follow it).
Imported by the trainer only (torch at the top is fine there).
"""
from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import torch

from fasttrain.core.errors import JobFailed, Problem, UserError

# Consecutive non-finite steps that --on-nan stop tolerates before it stops the run (fp16 overflows come
# alone or in pairs while the GradScaler backs off; three in a row means the run itself went bad).
MAX_NONFINITE_STREAK = 3
ON_NAN_MODES = ("stop", "skip")
EXIT_SIGINT = 130

SIGNAL_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "SIGINT"}


class GracefulStop:
    """Context manager: `requested` is the first signal number received (None until then)."""

    def __init__(self) -> None:
        self.requested: int | None = None
        self._owner = os.getpid()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> "GracefulStop":
        if threading.current_thread() is threading.main_thread():
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

    @property
    def name(self) -> str:
        return SIGNAL_NAMES.get(self.requested, str(self.requested)) if self.requested else ""

    @property
    def exit_code(self) -> int:
        return EXIT_SIGINT if self.requested == signal.SIGINT else 0


class QuietWorkerInit:
    """worker_init_fn wrapper: a worker ignores SIGINT/SIGTERM (the main process stops it), then runs `inner`.
    A class, not a closure, so it pickles for the spawn start method too."""

    def __init__(self, inner: Any = None):
        self.inner = inner

    def __call__(self, worker_id: int) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if self.inner is not None:
            self.inner(worker_id)


def quiet_workers(loader: Any) -> None:
    """Make the DataLoader inside a fasttrain Loader (or a plain one) start quiet workers."""
    inner = getattr(loader, "loader", loader)
    if getattr(inner, "num_workers", 0) > 0 and not isinstance(inner.worker_init_fn, QuietWorkerInit):
        inner.worker_init_fn = QuietWorkerInit(inner.worker_init_fn)


def shutdown_workers(loader: Any) -> None:
    """Stop a DataLoader's worker processes now (persistent ones included). Workers ignore SIGTERM, so they
    must be told to finish before interpreter exit, where multiprocessing would otherwise wait for them."""
    inner = getattr(loader, "loader", loader)
    # DataLoader has no public way to stop persistent workers before it is garbage-collected: its iterator's
    # _shutdown_workers() is what DataLoader itself calls on deletion.
    iterator = getattr(inner, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
        inner._iterator = None


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
    def from_env(cls) -> "SignalHook":
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


@dataclass
class NonFiniteGuard:
    """Counts consecutive non-finite steps on the device (no sync per step); read at check points."""

    device: torch.device
    streak: torch.Tensor = field(init=False)
    worst: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.streak = torch.zeros((), dtype=torch.long, device=self.device)
        self.worst = torch.zeros((), dtype=torch.long, device=self.device)

    def record(self, bad: torch.Tensor) -> None:
        self.streak = (self.streak + 1) * bad.long()
        self.worst = torch.maximum(self.worst, self.streak)

    def read_and_reset(self) -> int:
        worst = int(self.worst)
        self.worst = self.streak.clone()
        return worst

    def check(self, stop: bool, step: int, epoch: int, index: int, lr: float, last_good: Any) -> None:
        """Read the worst streak since the last check (a sync on a GPU); with `stop` (--on-nan stop), raise
        JobFailed once it reaches MAX_NONFINITE_STREAK. step/epoch/index (0-based)/lr: where, for the message."""
        worst = self.read_and_reset()
        if not stop or worst < MAX_NONFINITE_STREAK:
            return
        good = str(last_good) if last_good is not None else "none written yet"
        raise JobFailed(f"{worst} steps in a row had a non-finite loss or gradients, the last at optimizer step "
                        f"{step} (epoch {epoch + 1}, batch {index + 1}, LR {lr:.4g}); their updates "
                        f"were skipped and nothing was saved after them. Last good checkpoint: {good} (intact). "
                        "Lower optim.base_lr, set optim.clip_grad_norm, or use --on-nan skip")
