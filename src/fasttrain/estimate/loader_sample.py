"""Measure how fast ONE loader worker decodes and augments the user's images (`estimate --data DIR`).

A short timed loop in this process over a sample of the real files, with the same transform `train`
uses (transforms.train_transform), so the forecast can say whether the loader keeps up and how many
workers it needs. Units: images/s per worker.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fasttrain.datasets.image_folder import VAL_FRACTION
from fasttrain.estimate.forecast import LoaderSample
from fasttrain.profiles.schema import AugmentSpec, DataSpec

SAMPLE_FILES = 64
# `train`'s defaults (train --seed 0; datasets/build.build_datasets val_fraction): the same training split.
TRAIN_SEED = 0


def scan(root: Path, spec: DataSpec | None = None,
         keep: int = SAMPLE_FILES) -> tuple[int, int, list[Path] | list[bytes]]:
    """(training samples under root, validation samples, an evenly spread sample of the training files), counted
    the way `train` does (datasets/data_source.find_samples with train's default seed and validation fraction, a
    labels table's columns as `spec` says): a val/ folder, or the validation share split off one tree or table, is
    not training data. A prepared set (`fasttrain data prepare`): its manifest's counts and the encoded bytes of a
    sample read from a few of its shards."""
    from fasttrain.datasets.shards import is_prepared

    if is_prepared(root):
        return scan_prepared(root, keep)
    from fasttrain.datasets.data_source import find_samples
    _classes, train, val = find_samples(root, seed=TRAIN_SEED, val_fraction=VAL_FRACTION, spec=spec)
    files = [Path(path) for path, _label in train]
    stride = max(1, len(files) // keep)
    return len(files), len(val), files[::stride][:keep]


def scan_prepared(root: Path, keep: int) -> tuple[int, int, list[bytes]]:
    """(training and validation images of a prepared set, encoded bytes of up to `keep` training images from <= 4
    evenly spread shards)."""
    from fasttrain.datasets.shards import ShardImages, load_manifest

    manifest = load_manifest(root)
    shards = manifest["splits"]["train"]["shards"]
    picked = shards[::max(1, len(shards) // 4)][:4]
    data = ShardImages(root, picked, None)
    stride = max(1, len(data) // keep)
    return (int(manifest["splits"]["train"]["count"]), int(manifest["splits"].get("val", {}).get("count", 0)),
            [data.read(i) for i in range(0, len(data), stride)][:keep])


def timed_rate(one: Callable[[Any], None], items: Sequence[Any], budget_s: float, min_done: int,
               max_done: int | None = None) -> tuple[int, float]:
    """Call one(item) over `items` in turn, after one untimed warm-up call (imports, first allocations), until
    budget_s seconds have passed and at least min_done calls are timed, or max_done calls are -> (calls, seconds)."""
    one(items[0])
    done, started = 0, time.perf_counter()
    while True:
        one(items[done % len(items)])
        done += 1
        elapsed = time.perf_counter() - started
        if (elapsed >= budget_s and done >= min_done) or (max_done is not None and done >= max_done):
            return done, elapsed


def measure(files: list[Path] | list[bytes], augment: AugmentSpec, image_size: int,
            budget_s: float = 1.0) -> LoaderSample:
    """Decode + augment images in this one process for about `budget_s` seconds: a worker's rate. Files are
    decoded as train decodes a folder of them (PIL); the bytes of a prepared set's images as train reads shards
    (datasets/fast_decode, normalisation left to the device)."""
    from PIL import Image

    from fasttrain.datasets.fast_decode import FastTransform
    from fasttrain.datasets.transforms import train_transform
    transform = train_transform(augment, image_size)
    fast = FastTransform(transform)

    def one(item: Path | bytes) -> None:
        if isinstance(item, bytes):
            fast(item)
            return
        with Image.open(item) as img:
            transform(img.convert("RGB"))

    done, elapsed = timed_rate(one, files, budget_s, min_done=8, max_done=4 * len(files))
    what = "images of the prepared shards, fast decode path" if isinstance(files[0], bytes) else "files"
    return LoaderSample(done / elapsed, f"--data: {done} decodes of {min(done, len(files))} sampled {what}, "
                                        "one process, train transform")


def measure_batched(files: list[Path] | list[bytes], augment: AugmentSpec, image_size: int, batch: int,
                    budget_s: float = 0.5) -> LoaderSample:
    """Images/s of train's batched augmentation of images decoded once into RAM (datasets/batch_augment), in
    this process: what a step waits for when the images are already decoded (the first epoch also decodes each
    image once)."""
    import numpy as np
    import torch
    from PIL import Image

    from fasttrain.datasets import batch_augment

    with Image.open(files[0]) as img:
        width, height = img.size
    pixels = torch.zeros(batch, 3, height, width, dtype=torch.uint8)
    sizes = torch.tensor([[height, width]] * batch, dtype=torch.int32)
    scale = augment.random_resized_crop_scale

    def one(k: int) -> None:
        batch_augment.train_batch(pixels, sizes, image_size, scale, augment.hflip,
                                  batch_augment.sample_keys(0, k, np.arange(batch)))

    done, elapsed = timed_rate(one, list(range(64)), budget_s, min_done=3, max_done=64)
    return LoaderSample(done * batch / elapsed, f"--data: decoded once into RAM; {done} batches of {batch} "
                                                "augmented at once in the training process (sizes of the first file)")
