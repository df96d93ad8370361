"""This CPU's decode + augment rate per core, for `estimate` without --data.

Generated JPEGs of ImageNet's typical size (500 x 375, quality 90, photo-like content: smooth shapes with
fine grain) are decoded and run through `train`'s own transform (transforms.train_transform) at the plan's
image size, in this one process on one thread, for about a second. The rate is cached per CPU model, torch,
torchvision and Pillow versions, image size and augmentations (core/cache_dir.py), so later estimates cost
nothing. It is an estimate FROM THIS CPU: the profile's machine may decode faster or slower per core.
Units: images/s per core.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import platform
from pathlib import Path

from fasttrain.estimate.forecast import LoaderSample
from fasttrain.estimate.loader_sample import timed_rate
from fasttrain.profiles.schema import AugmentSpec

# ImageNet-1k train: most photos are 500 x 375 or 375 x 500 (the mean is about 400 x 350); quality 90 JPEG.
SOURCE_SIZE = (500, 375)
JPEG_QUALITY = 90
SAMPLE_IMAGES = 8
CACHE_FILE = "decode-rate.json"


def cpu_name() -> str:
    """The CPU model, as /proc/cpuinfo names it (platform.processor() elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def cache_key(image_size: int, augment: AugmentSpec) -> str:
    """CPU model, torch / torchvision / Pillow versions (read from the installed metadata: importing torchvision
    costs seconds), image size, augmentations and the sample's size."""
    from importlib.metadata import PackageNotFoundError, version

    def ver(dist: str) -> str:
        try:
            return version(dist)
        except PackageNotFoundError:
            return "none"
    parts = [cpu_name(), ver("torch"), ver("torchvision"), ver("pillow"), str(image_size),
             augment.model_dump_json(), f"{SOURCE_SIZE}@{JPEG_QUALITY}"]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:24]


def sample_jpegs(count: int = SAMPLE_IMAGES, size: tuple[int, int] = SOURCE_SIZE, seed: int = 0) -> list[bytes]:
    """Photo-like JPEGs: gradients and ellipses (what compresses like a photo) plus fine grain (texture)."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        w, h = size
        yy, xx = np.mgrid[0:h, 0:w]
        base = np.stack([(xx * rng.uniform(0.2, 0.6) + yy * rng.uniform(0.1, 0.5) + rng.uniform(0, 255)) % 256
                         for _ in range(3)], axis=-1)
        img = Image.fromarray(base.astype("uint8"))
        draw = ImageDraw.Draw(img)
        for _ in range(12):
            x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
            draw.ellipse((x0, y0, x0 + int(rng.integers(20, 200)), y0 + int(rng.integers(20, 200))),
                         fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
        img = img.filter(ImageFilter.GaussianBlur(2))
        grain = rng.normal(0, 12, (h, w, 3))
        img = Image.fromarray(np.clip(np.asarray(img, dtype=float) + grain, 0, 255).astype("uint8"))
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=JPEG_QUALITY)
        out.append(buf.getvalue())
    return out


def measure(image_size: int, augment: AugmentSpec, budget_s: float = 1.0,
            jpegs: list[bytes] | None = None) -> float:
    """Images/s ONE core decodes + augments (train_transform at image_size), timed for about budget_s."""
    import torch
    from PIL import Image

    from fasttrain.datasets.transforms import train_transform
    transform = train_transform(augment, image_size)
    jpegs = jpegs if jpegs is not None else sample_jpegs()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)   # a loader worker runs torch on one thread

    def one(data: bytes) -> None:
        with Image.open(io.BytesIO(data)) as img:
            transform(img.convert("RGB"))

    try:
        done, elapsed = timed_rate(one, jpegs, budget_s, min_done=len(jpegs))
    finally:
        torch.set_num_threads(threads)
    return done / elapsed


def per_core_rate(image_size: int, augment: AugmentSpec, cache_dir: Path | None = None) -> LoaderSample:
    """This CPU's per-core rate, from the cache or measured now (and cached when the cache can be written)."""
    from fasttrain.core.cache_dir import writable_cache_dir
    from fasttrain.core.errors import UserError
    from fasttrain.core.files import write_text_atomic
    key = cache_key(image_size, augment)
    path = None
    try:
        path = writable_cache_dir(cache_dir) / CACHE_FILE
        cached = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    except (UserError, OSError, ValueError):
        cached = {}
    if not isinstance(cached, dict):
        cached = {}
    rate = cached.get(key)
    if not isinstance(rate, (int, float)) or rate <= 0:
        rate = measure(image_size, augment)
        if path is not None:
            with contextlib.suppress(OSError):
                write_text_atomic(path, json.dumps({**cached, key: rate}, indent=1))
    w, h = SOURCE_SIZE
    return LoaderSample(float(rate), f"estimate from this CPU ({cpu_name()}): one core decodes + augments "
                                     f"{float(rate):,.0f} generated {w}x{h} JPEGs/s to {image_size} px",
                        estimated=True)
