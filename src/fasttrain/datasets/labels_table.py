"""A labels table (`--data train.csv`, a DataFrame from Python) read and its columns decided: pure where it can be.

A competition ships `train.csv` (image id, class) beside a folder of images. This module reads the table with the
stdlib csv module (pandas is not a dependency; a DataFrame is duck-typed: `.columns` and `.itertuples`) and decides,
from the header and the cells alone, which column is the label, whether a column says the split (`is_valid`,
`split`, `fold`), and the class names. Which column names the images needs the files: datasets/table_images.py.
Every bad input is one UserError line naming what was tried and the `--set data.*` key that settles it.
"""
from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttrain.core.errors import Problem, UserError

TABLE_SUFFIXES = (".csv", ".tsv")
# Column names, lower-cased, best first: what competitions and fastai call an image's id and its class.
IMAGE_NAMES = ("image", "image_id", "imageid", "image_name", "image_path", "img", "img_id", "img_name", "file",
               "filename", "file_name", "filepath", "file_path", "path", "id", "id_code", "fname", "name")
LABEL_NAMES = ("label", "labels", "class", "class_name", "classname", "class_id", "target", "category", "species",
               "breed", "diagnosis", "y")
SPLIT_NAMES = ("is_valid", "split", "fold", "subset")
TRAIN_WORDS = frozenset({"train", "training", "false", "0", "no", "f", "n"})
VAL_WORDS = frozenset({"val", "valid", "validation", "dev", "true", "1", "yes", "t", "y"})
TEST_WORDS = frozenset({"test", "testing", "holdout"})
# "Few distinct values relative to rows": a label column has at most this share of its rows as distinct values.
LABEL_DISTINCT_SHARE = 0.5
MAX_TABLE_BYTES = 2 << 30  # a labels table of 2 GiB is not a labels table
_INT = re.compile(r"^[+-]?\d+(\.0*)?$")


@dataclass(frozen=True)
class Table:
    """A labels table as text cells: the header and the rows (each as long as the header)."""

    header: list[str]
    rows: list[list[str]]
    where: str  # what a problem names: `train.csv` or `the DataFrame`

    def column(self, index: int) -> list[str]:
        return [row[index] for row in self.rows]


def is_table_file(path: Path) -> bool:
    return path.suffix.lower() in TABLE_SUFFIXES and path.is_file()


def read_table(path: Path) -> Table:
    """The table at `path`, or a UserError in one line (not text, empty, only a header, ragged rows)."""
    where = path.name
    try:
        if path.stat().st_size > MAX_TABLE_BYTES:
            raise _bad(where, f"{path.stat().st_size:,} bytes is too large for a labels table", "")
        raw = path.read_bytes()
    except OSError as exc:
        raise UserError([Problem("--data", f"cannot read {str(path)!r}: {exc.strerror or exc}",
                                 "check the path and its permissions")]) from None
    return parse_table(raw, where, tab=path.suffix.lower() == ".tsv")


def parse_table(raw: bytes, where: str, *, tab: bool = False) -> Table:
    """Bytes of a CSV/TSV -> Table. Pure."""
    if b"\x00" in raw[:1 << 16]:
        raise _bad(where, "is binary data, not a text table", "give the labels table (a CSV of image ids and classes)")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _bad(where, f"is not UTF-8 text (byte {exc.start:,})", "save the table as UTF-8 CSV") from None
    first = text.split("\n", 1)[0]
    delimiter = "\t" if tab or ("," not in first and "\t" in first) else ";" if "," not in first and ";" in first \
        else ","
    try:
        lines = [row for row in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
                 if any(cell.strip() for cell in row)]
    except csv.Error as exc:
        raise _bad(where, f"is not a readable CSV ({exc})", "save it as a plain CSV: one header line, one row an "
                   "image") from None
    if not lines:
        raise _bad(where, "is empty", "give a table with a header line (e.g. id,label) and one row an image")
    header = [cell.strip() for cell in lines[0]]
    if len(lines) == 1:
        raise _bad(where, f"has only a header ({', '.join(header)[:80]}) and no rows", "add one row an image")
    seen: set[str] = set()
    for name in header:
        if name and name in seen:
            raise _bad(where, f"names the column {name!r} twice in its header", "give each column its own name")
        seen.add(name)
    rows = []
    for number, row in enumerate(lines[1:], start=2):
        if len(row) > len(header) and any(c.strip() for c in row[len(header):]):
            raise _bad(where, f"row {number} has {len(row)} cells, the header {len(header)}",
                       "quote cells that contain the delimiter, or fix the row")
        rows.append([c.strip() for c in row[:len(header)]] + [""] * (len(header) - len(row)))
    return Table(header, rows, where)


def frame_table(frame: Any) -> Table:  # Any: duck-typed, so pandas is never imported here
    """A DataFrame-like object (`.columns` + `.itertuples` or `.to_dict("records")`) -> Table, cells as text."""
    try:
        header = [str(c).strip() for c in frame.columns]
        if hasattr(frame, "itertuples"):
            records = [list(r) for r in frame.itertuples(index=False, name=None)]
        else:
            records = [[r.get(c) for c in frame.columns] for r in frame.to_dict("records")]
    except Exception as exc:
        raise UserError([Problem("data", f"cannot read the DataFrame's rows ({type(exc).__name__}: {exc})",
                                 "pass a pandas DataFrame of image paths and labels")]) from None
    if not records:
        raise _bad("the DataFrame", "has no rows", "pass a DataFrame with one row an image")
    return Table(header, [[_cell(v) for v in r] for r in records], "the DataFrame")


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):  # None and NaN: a blank cell
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def is_frame_like(obj: object) -> bool:
    return hasattr(obj, "columns") and (hasattr(obj, "itertuples") or hasattr(obj, "to_dict"))


def _bad(where: str, what: str, fix: str) -> UserError:
    return UserError([Problem("--data" if where != "the DataFrame" else "data", f"{where} {what}", fix)])


def named_column(table: Table, key: str, name: str | None) -> int | None:
    """The index of the column the user named with --set `key` (None: not set); a UserError when there is none."""
    if name is None:
        return None
    if name in table.header:
        return table.header.index(name)
    lowered = [h.lower() for h in table.header]
    if name.lower() in lowered:
        return lowered.index(name.lower())
    raise UserError([Problem(key, f"{table.where} has no column {name!r} (its columns: {', '.join(table.header)})",
                             f"--set {key}=NAME with one of them", name)])


def image_candidates(table: Table) -> list[int]:
    """Columns to try for the images, best first: those named like one (IMAGE_NAMES order), then the rest."""
    lowered = [h.lower() for h in table.header]
    named = [lowered.index(n) for n in IMAGE_NAMES if n in lowered]
    return named + [i for i in range(len(lowered)) if i not in named]


def split_column(table: Table, skip: int) -> tuple[int, list[str]] | None:
    """(the column that says the split, "train"/"val"/"test" per row), or None: a column named like one
    (SPLIT_NAMES) whose every value is a train, val or test word and that marks some rows val. Pure."""
    for index, name in enumerate(table.header):
        if index == skip or name.lower() not in SPLIT_NAMES:
            continue
        words = [c.lower() for c in table.column(index)]
        if all(w in TRAIN_WORDS | VAL_WORDS | TEST_WORDS for w in words) and any(w in VAL_WORDS for w in words):
            return index, ["train" if w in TRAIN_WORDS else "val" if w in VAL_WORDS else "test" for w in words]
    return None


def label_column(table: Table, taken: set[int]) -> int:
    """The label column: the one named like one (LABEL_NAMES), else the only other column, else the only one with
    few distinct values; two candidates or none: a UserError that names them and `--set data.label_column`."""
    lowered = [h.lower() for h in table.header]
    named = [i for i, h in enumerate(lowered) if h in LABEL_NAMES and i not in taken]
    if len(named) == 1:
        return named[0]
    others = named or [i for i in range(len(lowered)) if i not in taken]
    if len(others) == 1:
        return others[0]
    rows = len(table.rows)
    few = [i for i in others if 2 <= len(set(table.column(i))) <= max(2, LABEL_DISTINCT_SHARE * rows)]
    if len(few) == 1 and not named:
        return few[0]
    shown = ", ".join(table.header[i] for i in (few or others)) or "none"
    what = (f"two or more columns could be the label ({shown})" if few or named else
            f"no column looks like a label (tried names {', '.join(LABEL_NAMES[:6])}...; columns left: {shown})")
    raise UserError([Problem("data.label_column", f"{table.where}: {what}",
                             "--set data.label_column=NAME says which")])


def class_names(labels: list[str]) -> tuple[list[str], dict[str, int]]:
    """(sorted class names, label -> index): integer labels in numeric order (0, 1, 2, ..., 10; "1.0" is 1),
    names in string order. Pure."""
    distinct = set(labels)
    if distinct and all(_INT.match(v) for v in distinct):
        as_int = {v: int(float(v)) for v in distinct}
        names = [str(n) for n in sorted(set(as_int.values()))]
        position = {name: i for i, name in enumerate(names)}
        return names, {v: position[str(n)] for v, n in as_int.items()}
    names = sorted(distinct)
    return names, {name: i for i, name in enumerate(names)}
