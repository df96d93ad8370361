"""Words broken across two lines of a terminal screen: `the input pipelin` / `e keeps up` (issue 43).

A screen read back from a terminal emulator is a list of lines. Two lines that follow each other in the same box or
table cell (split at the vertical rules │ ┃ ║, compared where both lines have the same rules) break a word when the
letters ending the one and the letters starting the other make a word together that neither piece is: the joined word
must be in `vocabulary` (the words of the same text laid out wide, where nothing wraps) while one of the pieces is
not. A real break between words (`keeps` / `up`) joins into no word; `pipelin` / `e` joins into `pipeline`.
A word cut short with `…` (a table's cell too narrow) counts too.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import pairwise

RULES = "│┃║"
LETTERS = re.compile(r"[A-Za-z]+")
TAIL = re.compile(r"([A-Za-z]+)\s*$")
HEAD = re.compile(r"^\s*([A-Za-z]+)")
CUT = re.compile(r"[^\s│┃║]+…")


def words(text: str) -> set[str]:
    return set(LETTERS.findall(text))


def _cells(line: str) -> tuple[tuple[int, ...], list[str]]:
    """(the columns of the line's vertical rules, the text between them)."""
    rules = tuple(i for i, ch in enumerate(line) if ch in RULES)
    edges = [-1, *rules, len(line)]
    return rules, [line[a + 1:b] for a, b in pairwise(edges)]


def _interior(line: str) -> set[str]:
    """The words of a line not touching the edge of a cell: whole words, never a broken piece."""
    found: set[str] = set()
    for cell in _cells(line)[1]:
        found |= {m.group() for m in LETTERS.finditer(cell)
                  if m.start() > 0 and cell[:m.start()].strip() and m.end() < len(cell.rstrip())}
    return found


def broken_words(lines: list[str], vocabulary: Iterable[str] = ()) -> list[str]:
    """`tail|head` for each word broken across two lines, and `word…` for each cut one; [] when the screen breaks
    only between words."""
    known = set(vocabulary)
    for line in lines:
        known |= _interior(line)
    found = [m.group() for line in lines for m in CUT.finditer(line)]
    for upper, lower in pairwise(lines):
        rules, top = _cells(upper)
        below_rules, bottom = _cells(lower)
        if rules != below_rules:
            continue
        for a, b in zip(top, bottom, strict=True):  # the same rules: the same cells
            tail, head = TAIL.search(a), HEAD.search(b)
            if not tail or not head:
                continue
            t, h = tail.group(1), head.group(1)
            if t + h in known and not (t in known and h in known):
                found.append(f"{t}|{h}")
    return found
