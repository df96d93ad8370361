"""Shared rendering helpers: one Console per stream, JSON with stable keys, TTY detection."""
from __future__ import annotations

import json
import os
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


def in_notebook_cell() -> bool:
    """This process was started from a notebook cell (`!fasttrain train` in Jupyter, Colab, Kaggle, VS Code): its
    output is a pseudo-terminal that the notebook shows as text, colours included, but cursor movement is not
    honoured, so a screen redrawn in place would pile up. The kernel's environment says so: jupyter_client sets
    JPY_PARENT_PID for the kernel and ipykernel its inline matplotlib backend; a cell's shell inherits both."""
    return "JPY_PARENT_PID" in os.environ or "backend_inline" in os.environ.get("MPLBACKEND", "")


# Off a terminal, tables are laid out this wide unless COLUMNS says otherwise (a log or CI page is wider than 80).
PLAIN_WIDTH = 120


def plain_width() -> int:
    """The width of output off a terminal: $COLUMNS when it is a positive number, else PLAIN_WIDTH."""
    value = os.environ.get("COLUMNS", "")
    return int(value) if value.isdigit() and int(value) > 0 else PLAIN_WIDTH


def console() -> Console:
    """Rich on a terminal; plain text (no escape codes) when piped, in CI or in tests."""
    tty = is_tty()
    return Console(force_terminal=tty, no_color=not tty, highlight=False, soft_wrap=not tty,
                   width=None if tty else plain_width())


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
