"""Measure how fast ONE loader worker decodes and augments the user's images (`estimate --data DIR`).

A short timed loop in this process over a sample of the real files, with the same transform `train`
uses (transforms.train_transform), so the forecast can say whether the loader keeps up and how many
workers it needs. Units: images/s per worker.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from fasttrain.core.errors import Problem, UserError
from fasttrain.estimate.forecast import LoaderSample
from fasttrain.profiles.schema import AugmentSpec

IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm"})
SAMPLE_FILES = 64


def scan(root: Path, keep: int = SAMPLE_FILES) -> tuple[int, list[Path]]:
    """(number of image files under root, an evenly spread sample of them)."""
    if not root.is_dir():
        raise UserError([Problem("--data", "not a directory", "give the folder that holds the images", str(root))])
    files: list[Path] = []
    for dirpath, dirnames, names in os.walk(root):
        dirnames.sort()
        files.extend(Path(dirpath) / n for n in sorted(names)
                     if os.path.splitext(n)[1].lower() in IMAGE_EXTENSIONS and not n.startswith("."))
    if not files:
        raise UserError([Problem("--data", "no image files found", f"expected {', '.join(sorted(IMAGE_EXTENSIONS))}",
                                 str(root))])
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
