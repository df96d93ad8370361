"""Run fasttrain in a real pseudo-terminal of a given size and read back what a person sees: the screen and its
scrollback, through pyte's terminal emulator (dev extra). The screens of issue 25 are checked at 80x24."""
from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

from conftest import REPO, child_env


@dataclass
class Terminal:
    code: int
    raw: str             # everything written, escape codes included
    lines: list[str]     # the scrollback then the screen, as shown, trailing blanks cut

    def text(self) -> str:
        return "\n".join(self.lines)


def run_in_pty(*args: str, columns: int = 80, rows: int = 24, cwd: Path | None = None, timeout: float = 300,
               env: dict[str, str] | None = None) -> Terminal:
    """`python -m fasttrain ARGS` with stdin, stdout and stderr on a pty of columns x rows."""
    import pyte

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    child_vars = child_env({"TERM": "xterm-256color", **(env or {})})
    for name in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "TERM_PROGRAM"):
        child_vars.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "fasttrain", *args], stdin=slave, stdout=slave, stderr=slave,
                            cwd=cwd or REPO, env=child_vars, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: the child closed its side
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        code = proc.wait()
        os.close(master)
    raw = b"".join(chunks).decode("utf-8", "replace")
    screen = pyte.HistoryScreen(columns, rows, history=100_000, ratio=0.5)
    screen.set_mode(pyte.modes.LNM)  # the pty turns \n into \r\n; keep it a new line either way
    stream = pyte.Stream(screen)
    stream.feed(raw)
    history = ["".join(ch.data for ch in line.values()) if isinstance(line, dict)
               else "".join(line[x].data for x in range(columns)) for line in screen.history.top]
    shown = list(screen.display)
    lines = [ln.rstrip() for ln in history + shown]
    while lines and not lines[-1]:
        lines.pop()
    return Terminal(code, raw, lines)
