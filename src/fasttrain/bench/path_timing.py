"""One input path timed once for `bench loader`'s comparison: a DataLoader over the path's dataset, images/s on
the wall clock after the first batch and images per CPU-second of the main process and its workers (uint8 batches
normalised here, so that work counts), and the RAM it held. Also torchvision's usual ImageFolder + PIL dataset,
the baseline the other paths are compared with."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from PIL.Image import Image
    from torch import Tensor

    from fasttrain.datasets.bundle import BadSample
    from fasttrain.datasets.fast_decode import EncodedImages
    from fasttrain.datasets.gpu_decode import GpuDecoder

    # what a loader over these datasets yields: (uint8 images, or file bytes for GPU decode), targets, bad files
    Batch = tuple[Tensor | list[Tensor], Tensor, list[tuple[str, str]]]


class TorchvisionFolder:
    """What torchvision.datasets.ImageFolder does per item (pil_loader, then the transform) over given samples:
    ImageFolder itself would rescan the whole tree to build the same list."""

    def __init__(self, samples: list[tuple[str, int]], transform: Callable[[Image], Tensor]):
        self.samples = samples
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: tuple[int, int]) -> tuple[Tensor, int] | BadSample:
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


def measure_path(name: str, dataset: TorchvisionFolder | EncodedImages, *, batch_size: int, workers: int,
                 images: int, max_seconds: float, gpu: GpuDecoder | None = None) -> dict[str, Any]:
    """One timed pass: images/s (wall, after the first batch) and images per CPU-second (whole pass)."""
    import torch
    from torch.utils.data import DataLoader, Dataset

    from fasttrain.bench.ram import RamSampler
    from fasttrain.datasets.gpu_decode import collate_bytes
    from fasttrain.datasets.loaders import collate_images

    # More keys than the timed images: the workers must still be alive (and their CPU readable) at the end.
    n_keys = max(images, batch_size * 2) + batch_size * (4 + 4 * workers)
    keys = [(i * 7919 + 1, i % len(dataset)) for i in range(n_keys)]
    # cast: the datasets are map-style by protocol (__len__, __getitem__); DataLoader's annotation names the class
    loader: DataLoader[Any] = DataLoader(cast("Dataset[Any]", dataset), batch_size=batch_size, sampler=keys,
                                         num_workers=workers,
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


def _timed(it: Iterator[Batch], gpu: GpuDecoder | None, max_seconds: float, images: int) -> tuple[int, float, float]:
    """Consume the loader; the first batch is start-up (worker fork, imports) and outside both the wall clock and
    the CPU count: -> (images after the first batch, CPU seconds then, time then)."""
    from fasttrain.datasets.fast_decode import normalise_batch

    def use(batch: Batch) -> int:
        data, targets, _bad = batch
        if gpu is not None and isinstance(data, list):  # file bytes (collate_bytes), decoded on the GPU
            out, kept = gpu(data, None)
            out.sum().item()  # wait for the device
            return len(kept)
        if not isinstance(data, list):  # uint8 batches: what to_device does in training, here on the CPU, counted
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
