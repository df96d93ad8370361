"""User-facing errors: every one of them becomes exit code 2 with one line per problem.

Commands raise these instead of printing and exiting themselves, so the CLI has one place
that decides how a problem is shown (plain lines, or a traceback with --debug).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the user's input: where, what value, what is wrong, how to fix it."""

    where: str
    message: str
    fix: str = ""
    value: object = None
    severity: str = "error"  # "error" stops the command; "note" is shown but allowed

    def line(self) -> str:
        shown = "" if self.value is None else f" (got {self.value!r})"
        fix = f"; {self.fix}" if self.fix else ""
        return f"{self.where}: {self.message}{shown}{fix}"


class UserError(Exception):
    """Bad usage or bad input: exit 2, one clear line per problem, no traceback."""

    exit_code = 2

    def __init__(self, problems: list[Problem] | str, *, title: str = ""):
        if isinstance(problems, str):
            problems = [Problem(where="error", message=problems)]
        self.problems = [p for p in problems if p.severity == "error"] or list(problems)
        self.title = title
        super().__init__("\n".join(p.line() for p in self.problems))

    def lines(self) -> list[str]:
        head = [self.title] if self.title else []
        return head + [p.line() for p in self.problems]


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
