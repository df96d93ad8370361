"""Shared rendering helpers: one Console per stream, JSON with stable keys, TTY detection."""
from __future__ import annotations

import json
import sys
from typing import Any, TextIO

from rich.console import Console


def is_tty(stream: TextIO | None = None) -> bool:
    """The one terminal check: a real terminal gets colour and live screens; pipes, files and CI get plain text."""
    stream = stream if stream is not None else sys.stdout
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty else False
    except ValueError:  # a closed stream
        return False


def console() -> Console:
    """Rich on a terminal; plain text (no escape codes) when piped, in CI or in tests."""
    tty = is_tty()
    return Console(force_terminal=tty, no_color=not tty, highlight=False, soft_wrap=not tty,
                   width=None if tty else 120)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
