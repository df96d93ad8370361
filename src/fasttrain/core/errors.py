"""User-facing errors: every one of them becomes exit code 2 with one line per problem.

Commands raise these instead of printing and exiting themselves, so the CLI has one place
that decides how a problem is shown (plain lines, or a traceback with --debug).
"""
from __future__ import annotations

import re
import reprlib
from dataclasses import dataclass, field

# Hostile input must not make hostile output: a quoted value, a place and a message are clipped, and
# one error prints at most MAX_LINES problems (then "... and N more").
MAX_VALUE_CHARS = 80
MAX_TEXT_CHARS = 300
MAX_LINES = 40


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def clip(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """`text` on one line, at most `limit` characters (then '...'), control characters escaped (no raw NUL
    or terminal escape sequence reaches the terminal)."""
    text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], text[:limit + 1])
    return text if len(text) <= limit else text[:limit] + "..."


def _short_repr() -> reprlib.Repr:
    short = reprlib.Repr()
    short.maxlevel, short.maxdict, short.maxlist, short.maxtuple, short.maxset = 3, 4, 6, 6, 6
    short.maxstring, short.maxother, short.maxlong = MAX_VALUE_CHARS, MAX_VALUE_CHARS, MAX_VALUE_CHARS
    return short


_SHORT = _short_repr()


def shown_value(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """repr(value), bounded in time and length; never raises (a 5,000-digit int has no str(), a nested
    alias bomb has a repr of gigabytes, a list may contain itself)."""
    try:
        text = _SHORT.repr(value)
    except Exception:  # e.g. ValueError: Exceeds the limit for integer string conversion
        text = f"<a {type(value).__name__} too large to show>"
    return clip(text, limit)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the user's input: where, what value, what is wrong, how to fix it."""

    where: str
    message: str
    fix: str = ""
    value: object = None
    severity: str = "error"  # "error" stops the command; "note" is shown but allowed

    def line(self) -> str:
        shown = "" if self.value is None else f" (got {shown_value(self.value)})"
        fix = f"; {clip(self.fix)}" if self.fix else ""
        where = clip(self.where.rstrip(": "), MAX_VALUE_CHARS + 40)
        head = f"{where}: " if where else ""  # where "" : a line of its own, e.g. "... and 12 more problems"
        return f"{head}{clip(self.message)}{shown}{fix}"


class UserError(Exception):
    """Bad usage or bad input: exit 2, one clear line per problem, no traceback."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | str, *, title: str = "", result: dict[str, object] | None = None):
        """`result`: what the command reports under --json beside the error (e.g. `profiles validate`'s per-file
        report); the error object goes into it, so stdout stays one JSON document."""
        if isinstance(problems, str):
            problems = [Problem(where="error", message=problems)]
        self.problems = [p for p in problems if p.severity == "error"] or list(problems)
        self.title = title
        self.result = result
        super().__init__("\n".join(p.line() for p in self.problems[:MAX_LINES]))

    def lines(self) -> list[str]:
        head = [self.title] if self.title else []
        body = [p.line() for p in self.problems[:MAX_LINES]]
        if len(self.problems) > MAX_LINES:
            body.append(f"... and {len(self.problems) - MAX_LINES:,} more problem(s)")
        return head + body


class JobFailed(Exception):
    """The job itself failed (training diverged, a check failed): exit 1."""

    exit_code = 1


@dataclass
class Problems:
    """Collects problems so a validator can report all of them at once, not just the first."""

    items: list[Problem] = field(default_factory=list)

    def add(self, where: str, message: str, fix: str = "", value: object = None, severity: str = "error") -> None:
        self.items.append(Problem(where, message, fix, value, severity))

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.items if p.severity == "error"]

    @property
    def notes(self) -> list[Problem]:
        return [p for p in self.items if p.severity != "error"]
