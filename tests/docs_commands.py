"""Helpers for tests/test_docs_commands.py: find the `fasttrain ...` command lines in README.md and docs/*.md,
and run one in a real child process with a time cap, or in this process when it needs no signal.

A command line is, inside a fenced code block that is ```console, ```bash/```sh/```shell or has no language:
  - a line `$ CMD` where CMD mentions fasttrain (`$ fasttrain ...`, `$ torchrun ... -m fasttrain ...`), or
  - a line starting `fasttrain ` in a ```console block or a block with no language (docs/train.md, estimate.md,
    reliability.md write them without the prompt).
Its trailing `# comment` belongs to it, and so do the lines right below it that hold only a `# comment`
(README's multi-node line continues its comment on the next line).
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL_LANGS = {"", "console", "bash", "sh", "shell"}

# The comment conventions the docs use to say a line cannot run as written on a 2-core CPU box.
NEEDS_GPU = re.compile(r"\bneeds (a|\d+) GPUs?\b", re.IGNORECASE)
SEVERAL_MACHINES = re.compile(r"\bseveral machines\b", re.IGNORECASE)
PROMISED_EXIT = re.compile(r"\bexit (\d)\b")


@dataclass
class DocCommand:
    file: str            # relative to the repository, e.g. docs/train.md
    line: int            # 1-based
    text: str            # the command as written, without prompt and comment
    comment: str = ""    # its comment, continuation lines included

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def needs_gpu(self) -> bool:
        return bool(NEEDS_GPU.search(self.comment))

    @property
    def several_machines(self) -> bool:
        return bool(SEVERAL_MACHINES.search(self.comment))

    @property
    def promised_exits(self) -> set[int]:
        return {int(c) for c in PROMISED_EXIT.findall(self.comment)}


def split_comment(line: str) -> tuple[str, str]:
    """`cmd  # comment` -> (cmd, comment); a # inside quotes or inside a word is not a comment."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def collect(files: list[Path] = DOC_FILES) -> list[DocCommand]:
    found: list[DocCommand] = []
    for path in files:
        lang: str | None = None
        last: DocCommand | None = None
        for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            stripped = raw.strip()
            if stripped.startswith("```"):
                lang = stripped[3:].strip().lower() if lang is None else None
                last = None
                continue
            if lang is None or lang not in SHELL_LANGS:
                continue
            if stripped.startswith("#") and last is not None:      # the comment goes on below the command
                last.comment += " " + stripped.lstrip("#").strip()
                continue
            if stripped.startswith("$ "):
                body = stripped[2:]
            elif stripped.startswith("fasttrain ") and lang in ("", "console"):
                body = stripped
            else:
                last = None
                continue
            text, comment = split_comment(body)
            if "fasttrain" not in text:
                last = None
                continue
            last = DocCommand(str(path.relative_to(REPO)), number, " ".join(text.split()), comment)
            found.append(last)
    return found


@dataclass
class Outcome:
    argv: list[str]
    code: int                 # after our SIGTERM too, when capped
    out: str
    seconds: float
    capped: bool = False
    notes: list[str] = field(default_factory=list)


def run_capped(args: list[str], cwd: Path, env: dict[str, str], cap_s: float,
               stop_when: Callable[[str, float], bool] | None = None) -> Outcome:
    """`python -m fasttrain ARGS` in cwd. At cap_s, or as soon as stop_when(output so far, seconds) is true, it gets
    SIGTERM (then SIGKILL 20 s later), its process group included; `capped` says it was stopped so."""
    log = cwd / f".out-{time.monotonic_ns()}.txt"
    argv = [sys.executable, "-m", "fasttrain", *args]
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as sink:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        capped = False
        try:
            while proc.poll() is None:
                elapsed = time.monotonic() - start
                if elapsed > cap_s or (stop_when is not None and stop_when(log.read_text(errors="replace"), elapsed)):
                    capped = True
                    break
                time.sleep(0.25)
            if capped:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        finally:
            with contextlib.suppress(ProcessLookupError):  # no stray grandchild (DDP workers) survives
                os.killpg(proc.pid, signal.SIGKILL)
    out = log.read_text(encoding="utf-8", errors="replace")
    log.unlink()
    return Outcome(["fasttrain", *args], proc.returncode, out, time.monotonic() - start, capped)


@contextlib.contextmanager
def _working_in(cwd: Path, env: dict[str, str]) -> Iterator[None]:
    """cwd and env for the length of an in-process line (torch's threads: conftest keeps every test at one)."""
    before_cwd, before_env = Path.cwd(), {k: os.environ.get(k) for k in env}
    os.chdir(cwd)
    os.environ.update(env)
    try:
        yield
    finally:
        os.chdir(before_cwd)
        for key, value in before_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_in_process(args: list[str], cwd: Path, env: dict[str, str]) -> Outcome:
    """`fasttrain ARGS` through the real entry point (fasttrain.cli.main: exit codes, one-line errors) in this
    process, stdout and stderr together as a child's would be: for lines that plan, inspect or print, which need
    no signal and would otherwise pay a child's ~3 s of torch and timm imports each."""
    from fasttrain.cli import main
    sink = io.StringIO()
    start = time.monotonic()
    with _working_in(cwd, env), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        code = main(list(args))
    return Outcome(["fasttrain", *args], code, sink.getvalue(), time.monotonic() - start)


def split_and(text: str) -> list[list[str]]:
    """shlex words of `a && b` as [[a...], [b...]] (each part must start with fasttrain)."""
    parts: list[list[str]] = [[]]
    for word in shlex.split(text):
        if word == "&&":
            parts.append([])
        else:
            parts[-1].append(word)
    return parts
