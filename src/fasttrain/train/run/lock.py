"""One process per run folder: an exclusive flock on runs/NAME/.lock for as long as the run writes there.

The lock belongs to the open file, so the operating system drops it when the process dies (SIGKILL, power
loss: nothing stale to clean up). The holder writes its pid, host and start time into the file, so a second
process (`--resume` of the same run from another shell) can say who holds it, then exits 2 before writing
anything. The file itself stays (removing it would let a third process lock a new file while the second
still holds the old one).
"""
from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from fasttrain.core.errors import Problem, UserError

LOCK_FILE = ".lock"


class RunLock:
    """Held from acquire() until release() (or the process ends)."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_holder(fd)
            os.close(fd)
            raise UserError([Problem(str(self.run_dir), f"in use by {holder}",
                                     "wait for it or stop it")]) from None
        except OSError:  # a file system without flock (some network mounts): run unlocked rather than not at all
            os.close(fd)
            return self
        self._fd = fd
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "since": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime())}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        except OSError:
            pass  # a full disk: the lock holds all the same, only the holder's name is missing
        return self

    def release(self) -> None:
        if self._fd is not None:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            finally:
                os.close(self._fd)
                self._fd = None


def _read_holder(fd: int) -> str:
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        return f"pid {info['pid']} on {info['host']} since {info['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "another process (it has not written its pid yet)"
