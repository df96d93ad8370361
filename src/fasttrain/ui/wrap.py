"""Lines broken only between words, for text shown on a terminal of known width.

A line longer than the terminal is wrapped by the terminal itself, at the last column, inside a word
(`the input pipelin|e keeps up`, issue 43). Text printed whole for a terminal goes through here first. Pure: text and
a width in, lines out. Off a terminal (a pipe, a log, CI) text stays whole: a log is read with its own width.
"""
from __future__ import annotations

import os
from typing import TextIO

from fasttrain.core.console import is_tty

# Where a word longer than a whole line may still be broken, best first: after a path's slash, then after a hyphen,
# an underscore or a dot (`runs/20261128-152231-cpu/model.safetensors` breaks after `cpu/`).
BREAKS = ("/", "-_.")
CONTINUED = " \\"  # a command's line that goes on: the shell joins the lines back into one command


def _split_long(word: str, room: int) -> list[str]:
    """`word` in pieces of at most `room` cells, each ending at the last break of the best kind that fits."""
    pieces = []
    while len(word) > room:
        cut = 0
        for kinds in BREAKS:
            cut = max((i + 1 for i, ch in enumerate(word[:room]) if ch in kinds), default=0)
            if cut:
                break
        cut = cut or room  # no break anywhere: a single token longer than a line is cut where it must be
        pieces.append(word[:cut])
        word = word[cut:]
    return [*pieces, word] if word else pieces


def wrap_words(text: str, width: int, indent: int = 0) -> list[str]:
    """`text` in lines of at most `width` cells of text, broken at spaces; the lines after the first start with
    `indent` more spaces (under a label the first line has beside it). A word longer than a line is broken after
    a `/`, else a `-`, `_` or `.` (BREAKS)."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        if line and len(line) + 1 + len(word) <= width:
            line += " " + word
            continue
        if line:
            lines.append(line)
        pieces = _split_long(word, max(1, width)) if len(word) > width else [word]
        lines.extend(pieces[:-1])
        line = pieces[-1]
    lines.append(line)
    return _indented(lines, indent)


def _indented(lines: list[str], indent: int) -> list[str]:
    return [lines[0], *(" " * indent + ln for ln in lines[1:])]


def shell_words(command: str) -> list[str]:
    """The words of a command line as written (quotes kept), split at spaces outside quotes."""
    words, word, quote = [], "", ""
    for ch in command:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == " ":
            if word:
                words.append(word)
            word = ""
            continue
        word += ch
    return [*words, word] if word else words


def wrap_command(command: str, width: int, indent: int = 0) -> list[str]:
    """A shell command in lines of at most `width` cells (`indent` spaces more after the first), broken between its
    words only, each line but the last ending in ` \\`: copied together, the lines run as the one command. A word
    longer than a line (a long path) is never broken: its line is longer than `width`, and the terminal wraps it."""
    lines: list[str] = []
    line = ""
    for word in shell_words(command):
        if line and len(line) + 1 + len(word) <= width - len(CONTINUED):
            line += " " + word
            continue
        if line:
            lines.append(line)
        line = word
    lines.append(line)
    ends = [CONTINUED] * (len(lines) - 1) + [""]
    return [ln + end for ln, end in zip(_indented(lines, indent), ends, strict=True)]


def terminal_width(stream: TextIO) -> int | None:
    """The columns of the terminal `stream` writes to, or None off a terminal (a pipe, a file, a notebook's cell)."""
    if not is_tty(stream):
        return None
    try:
        return os.get_terminal_size(stream.fileno()).columns or None
    except (OSError, ValueError, AttributeError):
        return None


def for_stream(text: str, stream: TextIO, indent: int = 2) -> str:
    """`text` wrapped between words to the terminal `stream` writes to (continuation lines indented), or whole when
    it is not a terminal."""
    width = terminal_width(stream)
    return text if width is None else "\n".join(wrap_words(text, width - indent, indent))
