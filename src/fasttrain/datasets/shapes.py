"""The built-in data set: coloured shapes on cluttered, noisy backgrounds, written as real PNG files.

`fasttrain train` with no arguments trains on it, so the default run exercises the real input path
(file open, PNG decode, augmentation, worker processes) without downloading anything. It is learnable
(a tiny CNN gets past 90% in a few CPU epochs) but not trivial: colours, sizes, positions and rotations
are random, and every image has clutter strokes and pixel noise, so colour or position alone say nothing.

Determinism: image `i` of a split is drawn from numpy's PCG64 seeded with (seed, split, i), so the bytes
depend only on the seed and the parameters, not on the order of generation. The set is cached under a
directory whose name holds the generator version, the seed and a hash of the parameters; generation writes
into a temporary directory and renames it into place, so a killed run never leaves half a set behind.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from fasttrain.core.cache_dir import CACHE_FIX, default_cache_dir, writable_cache_dir
from fasttrain.core.errors import Problem, UserError

# Bump when the drawing code changes: the cache key includes it, so old sets are not reused.
VERSION = 1

CLASSES: tuple[str, ...] = ("circle", "square", "triangle", "star", "cross", "ring", "frame", "crescent", "bar")
_SPLIT_IDS = {"train": 0, "val": 1}
_SUPERSAMPLE = 2  # draw at 2x then downsample: anti-aliased edges without PIL's slow AA paths
MANIFEST = "fasttrain-shapes.json"


@dataclass(frozen=True)
class ShapesSpec:
    """Parameters of the generated set; all of them go into the cache key."""

    image_size: int = 32        # pixels, square
    train_per_class: int = 600  # images per class in train/
    val_per_class: int = 100    # images per class in val/
    clutter: int = 3            # random strokes drawn behind and in front of the shape
    noise: float = 12.0         # std of the Gaussian pixel noise, in 0-255 units

    def key(self, seed: int) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]
        return f"shapes-v{VERSION}-seed{seed}-{digest}"


DEFAULT_SPEC = ShapesSpec()


def ensure_shapes(root: Path | None = None, *, seed: int = 0, spec: ShapesSpec | None = None) -> Path:
    """The directory holding train/<class>/*.png and val/<class>/*.png, generated once and then reused.

    `root` is the cache directory (default: $FASTTRAIN_CACHE or ~/.cache/fasttrain); the set lives in a
    sub-directory named by `ShapesSpec.key(seed)`.
    """
    spec = spec or DEFAULT_SPEC
    root = Path(root) if root is not None else default_cache_dir()
    final = root / spec.key(seed)
    try:
        if (final / MANIFEST).is_file():
            return final
    except OSError:  # e.g. a path through a file: writable_cache_dir says what is wrong
        pass
    writable_cache_dir(root)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=root))
    except OSError as exc:
        raise UserError([Problem("FASTTRAIN_CACHE", f"cannot write the shapes set under {root}: {exc.strerror}",
                                 CACHE_FIX, str(root))]) from exc
    try:
        try:
            write_shapes(tmp, seed=seed, spec=spec)
        except OSError as exc:  # disk full, quota, read-only file system
            raise UserError([Problem("FASTTRAIN_CACHE", f"cannot write the shapes set under {root}: "
                                     f"{exc.strerror or type(exc).__name__}", CACHE_FIX, str(root))]) from exc
        try:
            os.rename(tmp, final)
        except OSError:
            # Another process finished the same set first; theirs is identical, keep it.
            if not (final / MANIFEST).is_file():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def write_shapes(out: Path, *, seed: int, spec: ShapesSpec) -> None:
    """Write the whole set into `out` (no caching, no atomicity: ensure_shapes adds those)."""
    counts = {"train": spec.train_per_class, "val": spec.val_per_class}
    for split, per_class in counts.items():
        for name in CLASSES:
            (out / split / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class * len(CLASSES)):
            label = i % len(CLASSES)
            image = draw_image(label, seed=seed, split=split, index=i, spec=spec)
            image.save(out / split / CLASSES[label] / f"{i:06d}.png", optimize=False, compress_level=1)
    manifest = {"version": VERSION, "seed": seed, "classes": list(CLASSES), **asdict(spec)}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")


def draw_image(label: int, *, seed: int, split: str, index: int, spec: ShapesSpec) -> Image.Image:
    """One RGB image of class `label`; a pure function of its arguments."""
    rng = np.random.default_rng([seed, _SPLIT_IDS[split], index])
    big = spec.image_size * _SUPERSAMPLE
    background = _colour(rng)
    image = Image.new("RGB", (big, big), background)
    canvas = ImageDraw.Draw(image)
    _clutter(canvas, rng, big, spec.clutter)
    size = rng.uniform(0.45, 0.8) * big  # outer diameter of the shape, pixels
    margin = size / 2 + 1
    cx, cy = rng.uniform(margin, big - margin, size=2)
    angle = rng.uniform(0, 2 * math.pi)
    _draw_shape(canvas, CLASSES[label], (cx, cy), size / 2, angle, _contrasting(rng, background), background)
    _clutter(canvas, rng, big, max(0, spec.clutter // 2), thin=True)
    small = image.resize((spec.image_size, spec.image_size), Image.Resampling.BOX)
    if spec.noise > 0:
        pixels = np.asarray(small, dtype=np.float32)
        noisy = pixels + rng.normal(0.0, spec.noise, size=pixels.shape)
        small = Image.fromarray(np.clip(noisy, 0, 255).astype(np.uint8))
    return small


def _colour(rng: np.random.Generator) -> tuple[int, int, int]:
    red, green, blue = (int(c) for c in rng.integers(0, 256, size=3))
    return red, green, blue


def _contrasting(rng: np.random.Generator, background: tuple[int, int, int]) -> tuple[int, int, int]:
    """A random colour far enough from the background (Euclidean RGB distance > 120) to be seen."""
    for _ in range(50):
        colour = _colour(rng)
        if sum((a - b) ** 2 for a, b in zip(colour, background, strict=True)) > 120**2:
            return colour
    red, green, blue = background
    return 255 - red, 255 - green, 255 - blue


def _clutter(canvas: ImageDraw.ImageDraw, rng: np.random.Generator, big: int, n: int, thin: bool = False) -> None:
    for _ in range(n):
        x0, y0, x1, y1 = (float(v) for v in rng.uniform(0, big, size=4))
        width = 1 if thin else int(rng.integers(1, 4))
        canvas.line([(x0, y0), (x1, y1)], fill=_colour(rng), width=width)


def _polygon(center: tuple[float, float], radii: list[float], angle: float) -> list[tuple[float, float]]:
    """Vertices at equal angular steps around `center`, one radius per vertex, rotated by `angle` radians."""
    cx, cy = center
    n = len(radii)
    return [(cx + r * math.cos(angle + 2 * math.pi * k / n), cy + r * math.sin(angle + 2 * math.pi * k / n))
            for k, r in enumerate(radii)]


def _rotated_rect(center: tuple[float, float], half_w: float, half_h: float, angle: float) -> list[tuple[float, float]]:
    cx, cy = center
    c, s = math.cos(angle), math.sin(angle)
    corners = [(-half_w, -half_h), (half_w, -half_h), (half_w, half_h), (-half_w, half_h)]
    return [(cx + x * c - y * s, cy + x * s + y * c) for x, y in corners]


def _draw_shape(canvas: ImageDraw.ImageDraw, name: str, center: tuple[float, float], r: float, angle: float,
                colour: tuple[int, int, int], background: tuple[int, int, int]) -> None:
    cx, cy = center
    box = [cx - r, cy - r, cx + r, cy + r]
    if name == "circle":
        canvas.ellipse(box, fill=colour)
    elif name == "ring":
        canvas.ellipse(box, outline=colour, width=max(2, int(r * 0.35)))
    elif name == "square":
        canvas.polygon(_polygon(center, [r] * 4, angle), fill=colour)
    elif name == "frame":
        corners = _polygon(center, [r] * 4, angle)
        canvas.line(corners + corners[:1], fill=colour, width=max(2, int(r * 0.3)), joint="curve")
    elif name == "triangle":
        canvas.polygon(_polygon(center, [r] * 3, angle), fill=colour)
    elif name == "star":
        canvas.polygon(_polygon(center, [r, r * 0.4] * 5, angle), fill=colour)
    elif name == "cross":
        canvas.polygon(_rotated_rect(center, r, r * 0.28, angle), fill=colour)
        canvas.polygon(_rotated_rect(center, r * 0.28, r, angle), fill=colour)
    elif name == "bar":
        canvas.polygon(_rotated_rect(center, r, r * 0.3, angle), fill=colour)
    elif name == "crescent":
        canvas.ellipse(box, fill=colour)
        # A disc of the background colour bites into the full disc.
        dx, dy = math.cos(angle) * r * 0.55, math.sin(angle) * r * 0.55
        bite = [cx + dx - r * 0.85, cy + dy - r * 0.85, cx + dx + r * 0.85, cy + dy + r * 0.85]
        canvas.ellipse(bite, fill=background)
    else:  # pragma: no cover - CLASSES and this function change together
        raise ValueError(f"unknown shape {name!r}")
