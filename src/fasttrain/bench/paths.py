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
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from fasttrain.bench.rounds import rotated

BASELINE = "torchvision"
# Each timed pass runs until --max-seconds or this many passes over the sample: a fast path finishing one pass in
# a fraction of a second would otherwise be timed over a few clock ticks of CPU time (10 ms each).
TIMED_PASSES = 20
LABELS = {"torchvision": "torchvision ImageFolder + PIL (baseline)", "fast-decode": "fast decode (libjpeg-turbo, "
          "reduced size, uint8 augment)", "shards": "prepared shards (fasttrain data prepare)",
          "gpu-decode": "GPU decode (nvJPEG, batched)"}


class TorchvisionFolder:
    """What torchvision.datasets.ImageFolder does per item (pil_loader, then the transform) over given samples:
    ImageFolder itself would rescan the whole tree to build the same list."""

    def __init__(self, samples: list[tuple[str, int]], transform: Any):
        self.samples = samples
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: tuple[int, int]) -> Any:
        from torchvision.datasets.folder import pil_loader

        from fasttrain.datasets.bundle import BadSample
        from fasttrain.datasets.transforms import seeded_call

        seed, index = key
        path, target = self.samples[index]
        try:
            image = pil_loader(path)
        except (OSError, ValueError, SyntaxError) as exc:
            return BadSample(path, f"{type(exc).__name__}: {exc}")
        return seeded_call(self.transform, image, seed), target


def cpu_seconds() -> float:
    """CPU time of this process and its live children (the DataLoader workers) so far."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:  # a worker may exit between listing and reading
            pass
    return total


def measure_path(name: str, dataset: Any, *, batch_size: int, workers: int, images: int, max_seconds: float,
                 gpu: Any = None) -> dict[str, Any]:
    """One timed pass: images/s (wall, after the first batch) and images per CPU-second (whole pass)."""
    import torch
    from torch.utils.data import DataLoader

    from fasttrain.bench.ram import RamSampler
    from fasttrain.datasets.gpu_decode import collate_bytes
    from fasttrain.datasets.loaders import collate_images

    # More keys than the timed images: the workers must still be alive (and their CPU readable) at the end.
    keys = [(i * 7919 + 1, i % len(dataset)) for i in range(max(images, batch_size * 2) + batch_size * (4 + 4 * workers))]
    loader = DataLoader(dataset, batch_size=batch_size, sampler=keys, num_workers=workers,
                        collate_fn=collate_bytes if gpu is not None else collate_images)
    import psutil

    from fasttrain.bench.ram import pss_of

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # like a DataLoader worker: one core per process, so per-core figures compare
    idle_pss = pss_of(psutil.Process())
    try:
        with RamSampler() as ram:
            it = iter(loader)
            done, cpu0, first = _timed(it, gpu, max_seconds, max(images, batch_size))
            elapsed = time.perf_counter() - first
            cpu = cpu_seconds() - cpu0
            pss = ram.pss_now()
            del it
    finally:
        torch.set_num_threads(threads)
    return {"name": name, "images_per_s": done / max(elapsed, 1e-9),
            "images_per_s_per_core": done / max(cpu, 1e-9), "images": done, "cpu_s": cpu,
            "wall_s": elapsed, "workers": workers, "ram_bytes": max(0, pss - idle_pss), "rss_bytes": ram.peak_rss}


def _timed(it: Any, gpu: Any, max_seconds: float, images: int) -> tuple[int, float, float]:
    """Consume the loader; the first batch is start-up (worker fork, imports) and outside both the wall clock and
    the CPU count: -> (images after the first batch, CPU seconds then, time then)."""
    from fasttrain.datasets.fast_decode import normalise_batch

    def use(batch: Any) -> int:
        data, targets, _bad = batch
        if gpu is not None:
            out = gpu(data, None)
            out.sum().item()  # wait for the device
        else:  # uint8 batches: the normalisation training does in to_device, here on the CPU and counted
            normalise_batch(data)
        return int(targets.shape[0])

    use(next(it))
    cpu0 = cpu_seconds()
    first = time.perf_counter()
    done = 0
    for batch in it:
        done += use(batch)
        if done >= images or time.perf_counter() - first > max_seconds:
            break
    return done, cpu0, first


def combine(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rounds -> one row per path: medians of images/s and images/s per core, and the median of the per-round
    ratios of images/s per core to the baseline measured in the same round (pure)."""
    names = list(dict.fromkeys(s["name"] for s in samples))
    base = {s["round"]: s for s in samples if s["name"] == BASELINE}
    rows = []
    for name in names:
        mine = [s for s in samples if s["name"] == name]
        ratios = [s["images_per_s_per_core"] / base[s["round"]]["images_per_s_per_core"] for s in mine
                  if s["round"] in base and base[s["round"]]["images_per_s_per_core"] > 0]
        rows.append({"name": name, "label": LABELS.get(name, name), "status": "measured",
                     "images_per_s": statistics.median(s["images_per_s"] for s in mine),
                     "images_per_s_per_core": statistics.median(s["images_per_s_per_core"] for s in mine),
                     "per_core_vs_torchvision": statistics.median(ratios) if ratios else None,
                     "ram_bytes": max(s["ram_bytes"] for s in mine), "workers": mine[0]["workers"],
                     "rounds": len(mine), "images": sum(s["images"] for s in mine)})
    return rows


def recommend_path(rows: list[dict[str, Any]], train_rate: float | None) -> str:
    """One sentence: which path to use, by the measured rates (pure)."""
    measured = [r for r in rows if r["status"] == "measured"]
    if not measured:
        return "no input path could be measured"
    best = max(measured, key=lambda r: r["images_per_s"])
    base = next((r for r in measured if r["name"] == BASELINE), None)
    gain = f" ({best['per_core_vs_torchvision']:.1f}x the baseline per core)" if base and best.get(
        "per_core_vs_torchvision") else ""
    how = {"shards": "run `fasttrain data prepare SRC --out DST` once and train with --data DST",
           "fast-decode": "train --data on the folder uses it already",
           "gpu-decode": "decode on the GPU: the CPU paths cannot keep up",
           BASELINE: "the faster paths bring nothing measurable on these files"}[best["name"]]
    text = f"fastest: {best['name']} at {best['images_per_s']:.0f} img/s{gain}; {how}"
    if train_rate:
        text += (f"; the model trains at {train_rate:.0f} img/s, so it " +
                 ("keeps up" if best["images_per_s"] >= train_rate else "still does not keep up: more cores "
                  "or a smaller image size"))
    return text


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


def prepare_sample(source: str, classes: list[str], sample: list[tuple[str, int]], dst: Any,
                   image_size: int) -> Any:
    """Prepare the sample's files as shards in `dst` (all of it as training data) -> the ShardImages."""
    from pathlib import Path

    from fasttrain.datasets.prepare import run_plan
    from fasttrain.datasets.prepare_plan import plan_from_splits

    plan = plan_from_splits(Path(source), classes, sample, [], image_size=image_size, scale=1.15,
                            shard_size=max(1, len(sample) // 4))
    run_plan(plan, Path(dst))
    return Path(dst)


def path_runners(*, sample: list[tuple[str, int]] | None, shards: Any, augment: Any, image_size: int,
                 batch_size: int, workers: int, images: int, max_seconds: float,
                 gpu_device: Any) -> dict[str, Callable[[], dict[str, Any]]]:
    """name -> a function measuring that path once (datasets are built once, here)."""
    from functools import partial

    from fasttrain.datasets.fast_decode import FastImageFiles
    from fasttrain.datasets.shards import load_manifest, ShardImages
    from fasttrain.datasets.transforms import train_transform

    transform = train_transform(augment, image_size)
    common = dict(batch_size=batch_size, workers=workers, images=images, max_seconds=max_seconds)
    runners: dict[str, Callable[[], dict[str, Any]]] = {}
    if sample:
        runners[BASELINE] = partial(measure_path, BASELINE, TorchvisionFolder(sample, transform), **common)
        runners["fast-decode"] = partial(measure_path, "fast-decode", FastImageFiles(sample, transform), **common)
    if shards is not None:
        manifest = load_manifest(shards)
        runners["shards"] = partial(measure_path, "shards", ShardImages(
            shards, manifest["splits"]["train"]["shards"], transform), **common)
    if gpu_device is not None and sample:
        from fasttrain.datasets.gpu_decode import GpuDecoder

        runners["gpu-decode"] = partial(measure_path, "gpu-decode", FastImageFiles(sample, None),
                                        gpu=GpuDecoder(transform, gpu_device), **common)
    return runners


def compare_paths(bundle: Any, data: str, *, augment: Any, image_size: int, batch_size: int, workers: int,
                  images: int, rounds: int, max_seconds: float, train_rate: float | None, shards: Any = None,
                  progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """gather + measure + summarise: {paths: [...], recommendation, sample_images, not_measured: [...]}."""
    import tempfile
    from pathlib import Path

    from fasttrain.datasets.gpu_decode import why_not
    from fasttrain.datasets.shards import ShardImages, is_prepared, load_manifest

    source, classes, pool = _source_samples(bundle, data)
    sample = even_sample(pool, images) if pool else None
    skipped = []
    if sample is None:
        skipped.append({"name": BASELINE, "status": "not measured", "reason": "the prepared set's source folder "
                        "is not here: nothing to compare the shards with"})
    import torch

    gpu = torch.device("cuda") if torch.cuda.is_available() else None
    reason = why_not(gpu is not None)
    if reason:
        skipped.append({"name": "gpu-decode", "label": LABELS["gpu-decode"], "status": "not applicable",
                        "reason": reason})
    if shards is None and isinstance(bundle.train, ShardImages):
        shards = Path(data)
    with tempfile.TemporaryDirectory(prefix="fasttrain-shards-") as tmp:
        if shards is None and sample:
            if progress is not None:
                progress(f"preparing {len(sample)} sampled files as shards in a temporary folder")
            shards = prepare_sample(source, classes, sample, Path(tmp) / "set", image_size)
        elif shards is not None and not is_prepared(Path(shards)):
            load_manifest(Path(shards))  # the one-line error
        runners = path_runners(sample=sample, shards=Path(shards) if shards else None, augment=augment,
                               image_size=image_size, batch_size=batch_size, workers=workers,
                               images=TIMED_PASSES * (len(sample) if sample else images), max_seconds=max_seconds,
                               gpu_device=gpu)
        rows = combine(run_rounds(runners, rounds, progress))
    return {"paths": rows + skipped, "recommendation": recommend_path(rows, train_rate),
            "sample_images": len(sample) if sample else None, "workers": workers}


def _source_samples(bundle: Any, data: str) -> tuple[str, list[str], list[tuple[str, int]]]:
    """(source folder, classes, training (path, class) pairs) behind the bundle; for a prepared set its recorded
    source when that folder is still here, else no samples."""
    from pathlib import Path

    from fasttrain.datasets.shards import ShardImages, load_manifest

    if isinstance(bundle.train, ShardImages):
        manifest = load_manifest(Path(data))
        src = Path(manifest["source"])
        if not src.is_dir():
            return manifest["source"], manifest["classes"], []
        from fasttrain.datasets.image_folder import find_splits
        from fasttrain.datasets.prepare_plan import SPLIT_SEED, VAL_FRACTION

        classes, train, _ = find_splits(src, seed=SPLIT_SEED, val_fraction=VAL_FRACTION)
        return str(src), classes, train
    root = bundle.train.samples[0][0] if bundle.train.samples else data
    return _common_root([p for p, _ in bundle.train.samples]) or root, bundle.class_names, list(bundle.train.samples)


def _common_root(paths: list[str]) -> str | None:
    import os

    try:
        return os.path.commonpath(paths) if paths else None
    except ValueError:
        return None
