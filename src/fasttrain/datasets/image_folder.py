"""Find the images of an ImageFolder tree: `train/` and `val/`, or one tree split by a seeded fraction.

Layout accepted (class = folder name, sorted alphabetically to give class indices, like torchvision):
  DIR/train/<class>/*.png + DIR/val/<class>/*.png   (or validation/)
  DIR/train/<class>/*.png                            val split off train/ by `val_fraction`
  DIR/<class>/*.png                                  val split off the whole tree by `val_fraction`
Only the file names are read here (no decoding): corrupt files are found, skipped and counted at load time.
"""
from __future__ import annotations

import os
from pathlib import Path

from fasttrain.core.errors import Problem, UserError

IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm"})
VAL_DIR_NAMES = ("val", "validation")
# The share of a tree without val/ that `train` validates on, by default; `data prepare`, `estimate --data` and
# the flip and crop checks split the same way, so they see the files train trains on.
VAL_FRACTION = 0.1

Samples = list[tuple[str, int]]


def find_splits(root: Path, *, seed: int, val_fraction: float) -> tuple[list[str], Samples, Samples]:
    """(class names, train samples, val samples); a UserError with one line per problem otherwise."""
    if not root.exists():
        raise UserError([Problem("--data", f"data directory {str(root)!r} does not exist",
                                 "give a folder of class sub-folders, or --data shapes for the built-in set")])
    if not root.is_dir():
        raise UserError([Problem("--data", f"{str(root)!r} is a file, not a directory",
                                 "give a folder of class sub-folders (ImageFolder layout)")])
    train_dir = root / "train"
    val_dir = next((root / n for n in VAL_DIR_NAMES if (root / n).is_dir()), None)
    if train_dir.is_dir():
        classes, files = scan_tree(train_dir)
        if val_dir is not None:
            val_classes, val_files = scan_tree(val_dir)
            _same_classes(train_dir, classes, val_dir, val_classes)
            return classes, _flatten(classes, files), _flatten(classes, val_files)
    else:
        classes, files = scan_tree(root)
    train, val = split_by_fraction(files, classes, seed=seed, val_fraction=val_fraction)
    return classes, train, val


def scan_tree(tree: Path) -> tuple[list[str], dict[str, list[str]]]:
    """Class folders of `tree` and their image files (sorted, so indices are stable)."""
    classes = sorted(e.name for e in os.scandir(tree) if e.is_dir() and not e.name.startswith("."))
    if not classes:
        loose = [p for p in tree.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS]
        hint = ("images must sit in one sub-folder per class" if loose
                else "expected <dir>/<class>/*.png (or train/ and val/ holding class folders)")
        raise UserError([Problem("--data", f"no class folders in {str(tree)!r}", hint)])
    files: dict[str, list[str]] = {}
    for name in classes:
        found = []
        for dirpath, dirnames, filenames in os.walk(tree / name, followlinks=True):
            dirnames.sort()
            found += [os.path.join(dirpath, f) for f in sorted(filenames)
                      if os.path.splitext(f)[1].lower() in IMAGE_EXTENSIONS and not f.startswith(".")]
        files[name] = found
    empty = [name for name in classes if not files[name]]
    if len(empty) == len(classes):
        raise UserError([Problem("--data", f"no images in {str(tree)!r}",
                                 f"supported extensions: {', '.join(sorted(IMAGE_EXTENSIONS))}")])
    if empty:
        raise UserError([Problem("--data", f"empty class folders in {str(tree)!r}: {', '.join(empty)}",
                                 "put images in them or remove them")])
    return classes, files


def _same_classes(train_dir: Path, train: list[str], val_dir: Path, val: list[str]) -> None:
    if train == val:
        return
    only_train = sorted(set(train) - set(val))
    only_val = sorted(set(val) - set(train))
    parts = []
    if only_train:
        parts.append(f"only in {train_dir.name}/: {', '.join(only_train)}")
    if only_val:
        parts.append(f"only in {val_dir.name}/: {', '.join(only_val)}")
    raise UserError([Problem("--data", f"{train_dir.name}/ and {val_dir.name}/ have different classes ("
                             + "; ".join(parts) + ")", "give both the same class folders")])


def _flatten(classes: list[str], files: dict[str, list[str]]) -> Samples:
    return [(path, index) for index, name in enumerate(classes) for path in files[name]]


def split_by_fraction(files: dict[str, list[str]], classes: list[str], *, seed: int,
                      val_fraction: float) -> tuple[Samples, Samples]:
    """Stratified seeded split: each class gives round(n x fraction) files (at least 1 when it has 2+) to val."""
    if not 0 < val_fraction < 1:
        raise UserError([Problem("val_fraction", "must be between 0 and 1 to split one tree into train and val",
                                 "e.g. 0.1, or give train/ and val/ folders", val_fraction)])
    import numpy as np

    rng = np.random.default_rng(seed)
    train: Samples = []
    val: Samples = []
    for index, name in enumerate(classes):
        paths = files[name]
        order = rng.permutation(len(paths))
        n_val = min(len(paths) - 1, max(1, round(len(paths) * val_fraction))) if len(paths) > 1 else 0
        chosen = set(order[:n_val].tolist())
        for i, path in enumerate(paths):
            (val if i in chosen else train).append((path, index))
    if not val:  # every class has one image: none can be spared for validation, and a run would check nothing
        raise UserError([Problem("--data", f"every class has a single image ({len(train):,} images in all): none is "
                                 "left to validate on", "put at least 2 images in a class (one goes to validation), "
                                 "or give train/ and val/ folders")])
    return train, val
