"""Helpers for the data tests: small real PNG files in ImageFolder layout."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def write_png(path: Path, seed: int, size: int = 16) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, size=(size, size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def write_tree(root: Path, counts: dict[str, int], size: int = 16, seed: int = 0) -> Path:
    """root/<class>/<i>.png for each class and count; returns root."""
    for c, (name, n) in enumerate(counts.items()):
        for i in range(n):
            write_png(root / name / f"{i:03d}.png", seed=seed * 1000 + c * 100 + i, size=size)
    return root


def write_corrupt(path: Path) -> Path:
    """A file with an image extension that PIL cannot decode (a truncated PNG)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    good = write_png(path.with_suffix(".tmp.png"), seed=99)
    data = good.read_bytes()
    good.unlink()
    path.write_bytes(data[: len(data) // 3])
    return path
