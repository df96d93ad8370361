"""`bench loader`'s comparison of input paths on the user's own files, against torchvision's usual pipeline.

Paths, on the same sample of training files, with the same batch, image size and augmentation:
- `torchvision`: the baseline people write first: an ImageFolder-style dataset reading each file with
  torchvision's `pil_loader` (PIL, full-size decode) and the same v2 transform on the PIL image;
- `fast-decode`: datasets/fast_decode.py (libjpeg-turbo, reduced-size DCT decoding, uint8 tensor augmentation);
- `shards`: a `fasttrain data prepare` set (given with --shards, or prepared from the sample into a temporary
  folder), read by offset and decoded by the fast path;
- `gpu-decode`: bytes from the workers, batched nvJPEG decode and augmentation on the GPU; where there is no
  GPU, the row says why it does not apply.
Each path runs the same number of worker processes; rounds interleave the paths (rotating order) and the figures
are medians. Per core = images per CPU-second spent by the main process and its workers together after the first batch
(psutil's CPU times of the live processes), so a path that saves CPU shows it even on a machine shared with
other work; the same rule for every path. Paths that hand over uint8 batches (normalisation left to the
training device) are normalised here in the main process, on the CPU, so that work is counted too.
This module gathers the sample and runs the rounds; one path's timing is bench/path_timing.py, the rows and the
recommendation bench/path_summary.py.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fasttrain.bench.path_summary import BASELINE, LABELS, combine, recommend_path
from fasttrain.bench.path_timing import TorchvisionFolder, measure_path
from fasttrain.bench.rounds import rotated

if TYPE_CHECKING:
    from pathlib import Path

    import torch

    from fasttrain.datasets.bundle import DataBundle
    from fasttrain.profiles.schema import AugmentSpec

# Each timed pass runs until --max-seconds or this many passes over the sample: a fast path finishing one pass in
# a fraction of a second would otherwise be timed over a few clock ticks of CPU time (10 ms each).
TIMED_PASSES = 20


def run_rounds(paths: dict[str, Callable[[], dict[str, Any]]], rounds: int,
               progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Every path once per round, the order rotating by one each round."""
    samples = []
    for r in range(rounds):
        for name in rotated(list(paths), r):
            row = paths[name]()
            row["round"] = r
            samples.append(row)
            if progress is not None:
                progress(f"paths round {r + 1}/{rounds} {name}: {row['images_per_s']:.0f} img/s, "
                         f"{row['images_per_s_per_core']:.0f} img/s per core")
    return samples


# -- gather ------------------------------------------------------------------------------------------------
def even_sample(samples: list[tuple[str, int]], n: int) -> list[tuple[str, int]]:
    step = max(1, len(samples) // max(1, n))
    return samples[::step][:n]


def prepare_sample(source: str, classes: list[str], sample: list[tuple[str, int]], dst: Path,
                   image_size: int) -> Path:
    """Prepare the sample's files as shards in `dst` (all of it as training data) -> the prepared set's folder."""
    from pathlib import Path

    from fasttrain.datasets.prepare import run_plan
    from fasttrain.datasets.prepare_plan import plan_from_splits

    plan = plan_from_splits(Path(source), classes, sample, [], image_size=image_size, scale=1.15,
                            shard_size=max(1, len(sample) // 4))
    run_plan(plan, Path(dst))
    return Path(dst)


def path_runners(*, sample: list[tuple[str, int]] | None, shards: Path | None, augment: AugmentSpec, image_size: int,
                 batch_size: int, workers: int, images: int, max_seconds: float,
                 gpu_device: torch.device | None) -> dict[str, Callable[[], dict[str, Any]]]:
    """name -> a function measuring that path once (datasets are built once, here)."""
    from functools import partial

    from fasttrain.datasets.fast_decode import FastImageFiles
    from fasttrain.datasets.shards import ShardImages, load_manifest
    from fasttrain.datasets.transforms import train_transform

    transform = train_transform(augment, image_size)
    common: dict[str, Any] = {
        "batch_size": batch_size,
        "workers": workers,
        "images": images,
        "max_seconds": max_seconds,
    }
    runners: dict[str, Callable[[], dict[str, Any]]] = {}
    if sample:
        runners[BASELINE] = partial(measure_path, BASELINE, TorchvisionFolder(sample, transform), **common)
        runners["fast-decode"] = partial(measure_path, "fast-decode", FastImageFiles(sample, transform), **common)
    if shards is not None:
        manifest = load_manifest(shards)
        runners["shards"] = partial(
            measure_path, "shards", ShardImages(shards, manifest["splits"]["train"]["shards"], transform), **common
        )
    if gpu_device is not None and sample:
        from fasttrain.datasets.gpu_decode import GpuDecoder

        runners["gpu-decode"] = partial(
            measure_path, "gpu-decode", FastImageFiles(sample, None), gpu=GpuDecoder(transform, gpu_device), **common
        )
    return runners


def compare_paths(
    bundle: DataBundle,
    data: str,
    *,
    augment: AugmentSpec,
    image_size: int,
    batch_size: int,
    workers: int,
    images: int,
    rounds: int,
    max_seconds: float,
    train_rate: float | None,
    shards: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """gather + measure + summarise: {paths: [...], recommendation, sample_images, not_measured: [...]}."""
    import tempfile
    from pathlib import Path

    from fasttrain.datasets.gpu_decode import why_not
    from fasttrain.datasets.shards import ShardImages, is_prepared, load_manifest

    source, classes, pool = _source_samples(bundle, data)
    sample = even_sample(pool, images) if pool else None
    skipped = []
    if sample is None:
        skipped.append(
            {
                "name": BASELINE,
                "status": "not measured",
                "reason": "the prepared set's source (folder "
                "or labels table) is not here or does not read: nothing to compare the shards with",
            }
        )
    import torch

    gpu = torch.device("cuda") if torch.cuda.is_available() else None
    reason = why_not(gpu is not None)
    if reason:
        skipped.append(
            {"name": "gpu-decode", "label": LABELS["gpu-decode"], "status": "not applicable", "reason": reason}
        )
    if shards is None and isinstance(bundle.train, ShardImages):
        shards = Path(data)
    with tempfile.TemporaryDirectory(prefix="fasttrain-shards-") as tmp:
        if shards is None and sample:
            if progress is not None:
                progress(f"preparing {len(sample)} sampled files as shards in a temporary folder")
            shards = prepare_sample(source, classes, sample, Path(tmp) / "set", image_size)
        elif shards is not None and not is_prepared(Path(shards)):
            load_manifest(Path(shards))  # the one-line error
        runners = path_runners(
            sample=sample,
            shards=Path(shards) if shards else None,
            augment=augment,
            image_size=image_size,
            batch_size=batch_size,
            workers=workers,
            images=TIMED_PASSES * (len(sample) if sample else images),
            max_seconds=max_seconds,
            gpu_device=gpu,
        )
        rows = combine(run_rounds(runners, rounds, progress))
    return {
        "paths": rows + skipped,
        "recommendation": recommend_path(rows, train_rate),
        "sample_images": len(sample) if sample else None,
        "workers": workers,
    }


def _source_samples(bundle: DataBundle, data: str) -> tuple[str, list[str], list[tuple[str, int]]]:
    """(source folder, classes, training (path, class) pairs) behind the bundle; for a prepared set its recorded
    source (a folder or a labels table) when it is still here, else no samples."""
    from pathlib import Path

    from fasttrain.datasets.shards import ShardImages, load_manifest

    if isinstance(bundle.train, ShardImages):
        manifest = load_manifest(Path(data))
        src = Path(manifest["source"])
        if not src.exists():  # the folder or labels table it was prepared from
            return manifest["source"], manifest["classes"], []
        from fasttrain.core.errors import UserError
        from fasttrain.datasets.data_source import find_samples
        from fasttrain.datasets.image_folder import VAL_FRACTION
        from fasttrain.datasets.prepare_plan import SPLIT_SEED

        try:  # a table prepared with `--set data.*` may not read with the defaults: compare the shards alone
            classes, train, _ = find_samples(src, seed=SPLIT_SEED, val_fraction=VAL_FRACTION)
        except UserError:
            return manifest["source"], manifest["classes"], []
        return str(src), classes, train
    root = bundle.train.samples[0][0] if bundle.train.samples else data
    return _common_root([p for p, _ in bundle.train.samples]) or root, bundle.class_names, list(bundle.train.samples)


def _common_root(paths: list[str]) -> str | None:
    import os

    try:
        return os.path.commonpath(paths) if paths else None
    except ValueError:
        return None
