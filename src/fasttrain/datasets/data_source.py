"""Which samples a `--data` path names, whatever its shape: an ImageFolder tree or a labels table, one function for
every reader (build, the flip and crop checks, `estimate --data`), and the plan's notes about what was read.

A labels table (`train.csv`, `.tsv`) goes to datasets/table_images.py. A folder that holds `train.csv` and no
class folders (or only folders that look like splits: `train_images/`, `test_images/`) is a competition's folder:
its table is read, and a note says so. An ImageFolder tree whose class folders look like splits gets a warning:
a run would learn "which folder" instead of the classes.
"""
from __future__ import annotations

import os
from pathlib import Path

from fasttrain.datasets.image_folder import Samples, find_splits
from fasttrain.datasets.labels_table import TABLE_SUFFIXES, is_table_file, read_table
from fasttrain.datasets.table_images import TableData, table_data
from fasttrain.profiles.schema import DataSpec

TABLE_NAMES = ("train.csv", "train.tsv", "labels.csv", "train_labels.csv")
SPLIT_WORDS = ("train", "test", "val", "valid")  # a class folder whose name starts so looks like a split
SPLIT_NAMES = ("images", "imgs", "img")
_CACHE: dict[tuple[object, ...], TableData] = {}  # the table read once per process (the checks, then the run)


def looks_like_split(name: str) -> bool:
    """A folder name that is a split's or an image store's, not a class's (`train_images`, `test`, `valid`). Pure."""
    lowered = name.lower()
    return lowered.startswith(SPLIT_WORDS) or lowered in SPLIT_NAMES


def class_folders(root: Path) -> list[str]:
    """The class folders find_splits would read (those of root/train when there is one), hidden ones left out."""
    tree = root / "train" if (root / "train").is_dir() else root
    try:
        return sorted(e.name for e in os.scandir(tree) if e.is_dir() and not e.name.startswith("."))
    except OSError:
        return []


def competition_table(root: Path) -> Path | None:
    """The labels table a folder stands for: a TABLE_NAMES file in it when its class folders are none, or all look
    like splits (train_images/ and test_images/ beside train.csv); None: an ImageFolder tree."""
    if not root.is_dir():
        return None
    table = next((root / n for n in TABLE_NAMES if (root / n).is_file()), None)
    if table is None:
        return None
    folders = class_folders(root)
    return table if all(looks_like_split(f) for f in folders) else None


def table_of(path: Path) -> Path | None:
    """The labels table `path` names (itself, or the one of a competition's folder), else None."""
    if is_table_file(path):
        return path
    return competition_table(path)


TEST_DIRS = ("test_images", "test")  # where a competition keeps the images to predict, beside its table
SAMPLE_NAMES = ("sample_submission.csv", "sample_submission.tsv")


def submission_inputs(data: str) -> dict[str, str] | None:
    """What `fasttrain predict` takes for a competition whose table `data` names: its test images folder and its
    sample submission, as paths written beside `data` ({"test_images": ..., "sample_submission": ...}); None when
    `data` is no table or they are not beside it."""
    path = Path(data)
    try:
        table = table_of(path)
    except OSError:
        return None
    if table is None:
        return None
    folder = path if path.is_dir() else path.parent
    test = next((n for n in TEST_DIRS if (table.parent / n).is_dir()), None)
    sample = next((n for n in SAMPLE_NAMES if (table.parent / n).is_file()), None)
    if test is None or sample is None:
        return None
    return {"test_images": str(folder / test), "sample_submission": str(folder / sample)}


def open_table(path: Path, spec: DataSpec, *, seed: int, val_fraction: float) -> TableData:
    """The table at `path` read into samples (cached for the process: the checks and the run read it once)."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size, spec.image_column, spec.label_column,
           spec.images_dir, seed, val_fraction)
    if key not in _CACHE:
        _CACHE.clear()
        _CACHE[key] = table_data(read_table(path), path.parent, image_column=spec.image_column,
                                 label_name=spec.label_column, images_dir=spec.images_dir, seed=seed,
                                 val_fraction=val_fraction)
    return _CACHE[key]


def find_samples(path: Path, *, seed: int, val_fraction: float,
                 spec: DataSpec | None = None) -> tuple[list[str], Samples, Samples]:
    """find_splits' (class names, train samples, val samples) for a folder or a labels table."""
    table = table_of(path)
    if table is None:
        return find_splits(path, seed=seed, val_fraction=val_fraction)
    data = open_table(table, spec or DataSpec(), seed=seed, val_fraction=val_fraction)
    return data.classes, data.train, data.val


def frame_data(frame: object, spec: DataSpec, *, seed: int, val_fraction: float) -> TableData:
    """A DataFrame from Python as a labels table: its image paths relative to the current folder, or to
    data.images_dir (relative to the current folder, or absolute)."""
    from fasttrain.datasets.labels_table import frame_table
    return table_data(frame_table(frame), Path.cwd(), image_column=spec.image_column, label_name=spec.label_column,
                      images_dir=spec.images_dir or ".", seed=seed, val_fraction=val_fraction)


def data_notes(data: str, spec: DataSpec, *, seed: int, val_fraction: float) -> list[str]:
    """What the plan says about the data before a run: the table read (its columns, classes, what it left out),
    that a folder's table was taken, or a warning that class folders look like splits."""
    from fasttrain.core.given import datasets, is_given
    from fasttrain.datasets.labels_table import is_frame_like
    if is_given(data):
        given = datasets(data)
        return list(frame_data(given, spec, seed=seed, val_fraction=val_fraction).notes) if is_frame_like(given) \
            else []
    path = Path(data)
    table = table_of(path)
    if table is not None:
        notes = list(open_table(table, spec, seed=seed, val_fraction=val_fraction).notes)
        if table != path:
            folders = class_folders(path)
            why = f"its folders ({', '.join(folders)}) look like splits, not classes" if folders else \
                "no class folders"
            notes.insert(0, f"data: {path.name}/ holds {table.name} and {why}: read as --data {table}")
        return notes
    if not path.is_dir():  # table_of() found no table: a file here is no table either
        return []
    split_like = [f for f in class_folders(path) if looks_like_split(f)]
    if not split_like:
        return []
    tables = sorted(n for n in os.listdir(path) if n.lower().endswith(TABLE_SUFFIXES))
    trains = [f for f in split_like if f.lower().startswith("train")]
    meant = (f"--data {path / tables[0]}" if tables else
             (f"--data {path / trains[0]} (class folders inside it) or a labels table") if trains else "another folder")
    warning = (f"warning: class folders look like splits ({', '.join(split_like)}): the run would learn which "
               f"folder an image is in, not its class; did you mean {meant}?")
    return [warning]
