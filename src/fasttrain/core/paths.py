"""A path the user typed, with `~` and `~name` expanded, or one line saying why it cannot be."""
from __future__ import annotations

from pathlib import Path

from fasttrain.core.errors import Problem, UserError


def expand_user(text: str, where: str, fix: str) -> Path:
    """Path(text).expanduser(); for a `~name` with no such user on this machine (pathlib raises RuntimeError: there
    is no home directory to expand to) a UserError naming `where` (the flag or variable) and the `fix`."""
    try:
        return Path(text).expanduser()
    except RuntimeError:
        user = text[1:].split("/")[0]
        raise UserError([Problem(where, f"cannot expand {text!r}: no user {user!r} on this machine", fix,
                                 text)]) from None
