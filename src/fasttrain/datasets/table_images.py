"""A labels table's rows made into (image path, class index) samples: the image column and its folder found on
disk, rows without an image or a label dropped (or refused), duplicates kept once, the validation split.

The folder and the extension are decided once from a sample of the column (not per row); then each row is one
lookup in the folder's listing (no stat a row), so a 60,000-row table takes a fraction of a second.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fasttrain.core.errors import Problem, UserError
from fasttrain.datasets.image_folder import IMAGE_EXTENSIONS, Samples, split_by_fraction
from fasttrain.datasets.labels_table import (
    Table,
    class_names,
    image_candidates,
    label_column,
    named_column,
    split_column,
)

# Folders beside the table where competitions put the training images, tried in this order ("" = its own folder).
IMAGE_DIRS = ("train_images", "train", "images", "img", "imgs", "")
PROBE_ROWS = 32          # rows of a column looked up to decide its folder and extension
MAX_MISSING_SHARE = 0.05  # rows without an image (or a label) beyond this share stop the run; below, a note
EXAMPLES = 3
_SUFFIXES = ("", *sorted(IMAGE_EXTENSIONS), *sorted(e.upper() for e in IMAGE_EXTENSIONS))


@dataclass(frozen=True)
class TableData:
    """What a labels table gives a run: find_splits' (class names, train, val), and the notes for the plan."""

    classes: list[str]
    train: Samples
    val: Samples
    notes: tuple[str, ...]


class Folder:
    """One folder's file names, listed once: a row's id is a set lookup, not a stat."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.names = {e.name for e in os.scandir(path)} if path.is_dir() else set()
        except OSError:
            self.names = set()

    def find(self, value: str, first: str) -> str | None:
        """The image file `value` names here (the extension `first` tried first, then none, then the others)."""
        if not value:
            return None
        nested = "/" in value or os.sep in value or os.path.isabs(value)
        for ext in (first, *_SUFFIXES):
            name = value + ext
            if ext == "" and os.path.splitext(value)[1].lower() not in IMAGE_EXTENSIONS:
                continue
            if (os.path.isfile(self.path / name)) if nested else (name in self.names):
                return str(self.path / name)
        return None


def locate(table: Table, base: Path, column: int | None, images_dir: str | None) -> tuple[int, Folder, str]:
    """(the image column, its folder, the extension its ids lack or ""), decided on PROBE_ROWS rows of each
    candidate column in each candidate folder; none found: a UserError naming what was tried."""
    dirs = [Path(images_dir) if Path(images_dir).is_absolute() else base / images_dir] if images_dir else \
        [base / d for d in IMAGE_DIRS if (base / d).is_dir()]
    if images_dir and not dirs[0].is_dir():
        raise UserError([Problem("data.images_dir", f"no folder {str(dirs[0])!r} (the images of {table.where})",
                                 "give the folder of its images, relative to the table or absolute", images_dir)])
    folders = [Folder(d) for d in dirs]
    columns = [column] if column is not None else image_candidates(table)
    rows = len(table.rows)
    probe = table.rows[::max(1, rows // PROBE_ROWS)][:PROBE_ROWS]
    best: tuple[int, int, Folder, str] | None = None
    for index in columns:
        for folder in folders:
            found = [_extension(folder, row[index]) for row in probe]
            hits = [ext for ext in found if ext is not None]
            if hits and (best is None or len(hits) > best[0]):
                best = (len(hits), index, folder, max(set(hits), key=hits.count))
        if best is not None and best[0] * 2 >= len(probe):  # most of this column's ids are images: take it
            break
    if best is None:
        tried = ", ".join(f"{d.name or '.'}/" for d in dirs) if dirs else f"no images folder beside {table.where}"
        named = f"column {table.header[column]!r}" if column is not None else "no column's values"
        raise UserError([Problem("data.image_column" if column is None else "data.images_dir",
                                 f"{table.where}: {named} name image files (looked in {tried}, with and without "
                                 f"{', '.join(sorted(IMAGE_EXTENSIONS))})",
                                 "--set data.image_column=NAME and/or data.images_dir=FOLDER says where")])
    return best[1], best[2], best[3]


def _extension(folder: Folder, value: str) -> str | None:
    """The extension that makes `value` an image file in `folder` ("" when it has its own), or None."""
    found = folder.find(value, "")
    if found is None:
        return None
    return found[len(str(folder.path / value)):]


def table_data(table: Table, base: Path, *, image_column: str | None, label_name: str | None,
               images_dir: str | None, seed: int, val_fraction: float) -> TableData:
    """The table's samples and split, with the plan's notes; every bad input a one-line UserError."""
    chosen = named_column(table, "data.image_column", image_column)
    image_index, folder, ext = locate(table, base, chosen, images_dir)
    split = split_column(table, image_index)
    taken = {image_index} | ({split[0]} if split else set())
    label_index = named_column(table, "data.label_column", label_name)
    label_index = label_column(table, taken) if label_index is None else label_index
    paths = [folder.find(row[image_index], ext) for row in table.rows]
    labels = [row[label_index] for row in table.rows]
    notes = _dropped(table, image_index, [r for r, p in enumerate(paths) if p is None], "with no image file",
                     "data.images_dir")
    notes += _dropped(table, image_index, [r for r, lab in enumerate(labels) if not lab],
                      f"with a blank {table.header[label_index]!r}", "data.label_column")
    found: dict[int, str] = {}  # the rows kept, each with its image (first row of each image, in table order)
    seen, twice = set(), 0
    for row, (path, label) in enumerate(zip(paths, labels, strict=True)):
        if path is None or not label or (split and split[1][row] == "test"):
            continue
        if path in seen:
            twice += 1
            continue
        seen.add(path)
        found[row] = path
    keep = list(found)
    if twice:
        notes.append(f"{table.where}: {twice:,} rows name an image listed before: the first row of each kept")
    names, index_of = class_names([labels[r] for r in keep])
    if len(names) < 2:
        raise UserError([Problem("data.label_column", f"{table.where}: every row of column "
                                 f"{table.header[label_index]!r} has the same label ({names[0] if names else ''!r}): "
                                 "nothing to tell apart", "give a table with 2 or more classes, or --set "
                                 "data.label_column=NAME")])
    where = folder.path.name + "/" if folder.path != base else "beside it"
    shown = ", ".join(names[:8]) + (f", ... ({len(names)} in all)" if len(names) > 8 else "")
    notes.insert(0, f"data: {table.where}, {len(keep):,} images ({table.header[image_index]}"
                    f"{' + ' + ext if ext else ''}, {where}), {len(names)} classes from column "
                    f"{table.header[label_index]!r}: {shown}")
    if split:
        train = [(found[r], index_of[labels[r]]) for r in keep if split[1][r] == "train"]
        val = [(found[r], index_of[labels[r]]) for r in keep if split[1][r] == "val"]
        if not train or not val:
            raise UserError([Problem("data.label_column", f"{table.where}: column {table.header[split[0]]!r} "
                                     f"marks {'no' if not train else 'every'} row for training",
                                     "mark a share of the rows for validation, or remove the column")])
        notes.append(f"validation: the {len(val):,} rows column {table.header[split[0]]!r} marks")
        return TableData(names, train, val, tuple(notes))
    files: dict[str, list[str]] = {name: [] for name in names}
    for r in keep:
        files[names[index_of[labels[r]]]].append(found[r])
    train, val = split_by_fraction(files, names, seed=seed, val_fraction=val_fraction)
    notes.append(f"validation: {len(val):,} images, {val_fraction:.0%} of each class (seed {seed}); a column "
                 "is_valid (true/false) or split (train/valid) chooses them")
    return TableData(names, train, val, tuple(notes))


def _dropped(table: Table, image_index: int, missing: Sequence[int], what: str, key: str) -> list[str]:
    """A note for a few rows without (an image, a label); a UserError when more than MAX_MISSING_SHARE lack it."""
    if not missing:
        return []
    examples = ", ".join(repr(table.rows[r][image_index]) for r in missing[:EXAMPLES])
    words = f"{len(missing):,} of {len(table.rows):,} rows {what} (e.g. {examples})"
    if len(missing) > MAX_MISSING_SHARE * len(table.rows):
        raise UserError([Problem(key, f"{table.where}: {words}", f"--set {key}=... says where"
                                 if key == "data.images_dir" else "fill in the labels or --set data.label_column="
                                 "NAME")])
    return [f"warning: {table.where}: {words}: left out of the run"]
