"""Measure how fast ONE loader worker decodes and augments the user's images (`estimate --data DIR`).

A short timed loop in this process over a sample of the real files, with the same transform `train`
uses (transforms.train_transform), so the forecast can say whether the loader keeps up and how many
workers it needs. Units: images/s per worker.
"""
from __future__ import annotations

import time
from pathlib import Path

from fasttrain.estimate.forecast import LoaderSample
from fasttrain.profiles.schema import AugmentSpec

SAMPLE_FILES = 64
# `train`'s defaults (train --seed 0; datasets/build.build_datasets val_fraction): the same training split.
TRAIN_SEED, TRAIN_VAL_FRACTION = 0, 0.1


def scan(root: Path, keep: int = SAMPLE_FILES) -> tuple[int, list[Path]]:
    """(training samples under root, an evenly spread sample of their files), counted the way `train` does
    (datasets/image_folder.find_splits with train's default seed and validation fraction): a val/ folder, or
    the validation share split off one tree, is not training data."""
    from fasttrain.datasets.image_folder import find_splits
    _classes, train, _val = find_splits(root, seed=TRAIN_SEED, val_fraction=TRAIN_VAL_FRACTION)
    files = [Path(path) for path, _label in train]
    stride = max(1, len(files) // keep)
    return len(files), files[::stride][:keep]


def measure(files: list[Path], augment: AugmentSpec, image_size: int, budget_s: float = 1.0) -> LoaderSample:
    """Decode + augment images in this one process for about `budget_s` seconds: a worker's rate."""
    from PIL import Image

    from fasttrain.datasets.transforms import train_transform
    transform = train_transform(augment, image_size)

    def one(path: Path) -> None:
        with Image.open(path) as img:
            transform(img.convert("RGB"))

    one(files[0])  # warm-up: imports, first allocations
    done, started = 0, time.perf_counter()
    while True:
        one(files[done % len(files)])
        done += 1
        elapsed = time.perf_counter() - started
        if (elapsed >= budget_s and done >= 8) or done >= 4 * len(files):
            break
    return LoaderSample(done / elapsed, f"--data: {done} decodes of {min(done, len(files))} sampled files, "
                                        "one process, train transform")
