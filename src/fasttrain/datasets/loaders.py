"""DataLoaders built from a DataBundle and a Plan: the settings the profile chose, applied as measured.

The train loader walks an EpochSampler (order = f(seed, epoch), resumable), the val loader walks the data in
file order. Image batches come out of the collate function as (images, targets, bad files); `Loader` strips
the third part, records the skipped files in the bundle (main process, so worker processes need no shared
state) or, in strict mode, stops with a UserError naming the file.
"""
from __future__ import annotations

import random
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from fasttrain.core.errors import Problem, UserError
from fasttrain.datasets.bundle import BadSample, DataBundle
from fasttrain.datasets.sampler import EpochSampler, sample_seed
from fasttrain.plan import Plan

if TYPE_CHECKING:
    from types import TracebackType


class SeededIndices:
    """Wraps an EpochSampler so each index travels with its augmentation seed: (sample_seed, index)."""

    def __init__(self, sampler: EpochSampler):
        self.sampler = sampler

    def __iter__(self) -> Iterator[tuple[int, int]]:
        seed, epoch = self.sampler.seed, self.sampler.epoch
        return ((sample_seed(seed, epoch, i), i) for i in self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)


def collate_images(samples: list[Any]) -> tuple[Any, Any, list[tuple[str, str]]]:
    """Stack the good samples; report the bad ones as (path, reason) instead of failing the batch."""
    import torch

    good = [s for s in samples if not isinstance(s, BadSample)]
    bad = [(s.path, s.reason) for s in samples if isinstance(s, BadSample)]
    if not good:
        return None, torch.empty(0, dtype=torch.long), bad
    out = None
    if torch.utils.data.get_worker_info() is not None:  # like default_collate: build the batch in shared memory
        first = good[0][0]  # so it crosses to the main process without another copy
        storage = first.untyped_storage()._new_shared(len(good) * first.numel() * first.element_size(),
                                                      device=first.device)
        out = first.new(storage).resize_(len(good), *first.shape)
    images = torch.stack([image for image, _ in good], out=out)
    targets = torch.tensor([target for _, target in good], dtype=torch.long)
    return images, targets, bad


def start_worker(worker_id: int) -> None:
    """A worker's start: it ignores SIGINT and SIGTERM (one process group, so a terminal's Ctrl-C or a group-wide
    kill reaches it too; the main process stops it, with no worker traceback), then seeds numpy and `random` from
    torch's worker seed (itself from the loader's seeded generator). A module function: it pickles for spawn."""
    import numpy as np
    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    quiet_fd_handoff_race()
    worker_seed = torch.initial_seed() % 2**32
    np.random.seed(worker_seed)
    random.seed(worker_seed)


def quiet_fd_handoff_race() -> None:
    """In this process (a worker, or the main process of a run with workers), from now on: no traceback for the
    file-descriptor hand-off race, chained to whatever thread hook is in place (idempotent).

    A worker hands each batch's memory to the main process as a file descriptor, served on a
    multiprocessing.resource_sharer thread. When the main process stops a loader mid-epoch (bench loader's timed
    window, a time budget, a stop), a hand-off in flight ends with the peer's socket closed, and that thread printed
    a harmless ConnectionResetError traceback into the user's output. Workers filtered it since it was first seen;
    on 2026-11-26 it still reached `bench loader`'s output twice in one loaded test run, so the main process (which
    has resource_sharer threads of its own) filters it too. The serving thread catches the error itself and hands
    it to `sys.excepthook`, not to `threading.excepthook` (multiprocessing/resource_sharer.py, _serve), so both
    hooks are filtered: the filter on threading.excepthook alone let the traceback through (it was still seen in
    `bench loader`'s output after that). Only that race is silenced; any other error still reaches the previous
    hooks."""
    previous_thread_hook, previous_hook = threading.excepthook, sys.excepthook
    if not getattr(previous_thread_hook, "fasttrain_fd_filter", False):
        def thread_hook(args: threading.ExceptHookArgs) -> None:
            if not (args.thread is not None and is_handoff_race(args.thread.name, args.exc_value)):
                previous_thread_hook(args)

        thread_hook.fasttrain_fd_filter = True  # type: ignore[attr-defined]  # a mark on the function: installed once
        threading.excepthook = thread_hook
    if not getattr(previous_hook, "fasttrain_fd_filter", False):
        def hook(kind: type[BaseException], value: BaseException, tb: TracebackType | None) -> None:
            if not is_handoff_race(threading.current_thread().name, value):
                previous_hook(kind, value, tb)

        hook.fasttrain_fd_filter = True  # type: ignore[attr-defined]  # a mark on the function: installed once
        sys.excepthook = hook


def is_handoff_race(thread_name: str, error: BaseException | None) -> bool:
    """Whether an error in thread `thread_name` is the hand-off race: a connection cut in a resource_sharer
    `_serve` thread. Pure."""
    return "_serve" in thread_name and isinstance(error, (ConnectionError, EOFError))


class Loader:
    """A DataLoader that yields (images, targets) and accounts for skipped files. len() = batches left."""

    def __init__(self, loader: Any, bundle: DataBundle, sampler: EpochSampler, images: bool):
        self.loader = loader
        self.bundle = bundle
        self.sampler = sampler
        self.images = images
        self.dataset = loader.dataset
        self.batch_size = loader.batch_size
        self.num_workers = loader.num_workers

    def __len__(self) -> int:
        return len(self.loader)

    def shutdown(self) -> None:
        """Stop the worker processes now (persistent ones included): they ignore SIGTERM, so they must be told to
        finish before interpreter exit, where multiprocessing would otherwise wait for them."""
        # DataLoader has no public way to stop persistent workers before it is garbage-collected: its iterator's
        # _shutdown_workers() is what DataLoader itself calls on deletion.
        iterator = getattr(self.loader, "_iterator", None)
        if iterator is not None and hasattr(iterator, "_shutdown_workers"):
            iterator._shutdown_workers()
            self.loader._iterator = None

    def __iter__(self) -> Iterator[Any]:
        if not self.images:
            yield from self.loader
            return
        for images, targets, bad in self.loader:
            if bad:
                self._skip(bad)
            if images is None:  # every file of the batch was bad
                continue
            yield images, targets

    def _skip(self, bad: list[tuple[str, str]]) -> None:
        skip_bad(self.bundle, bad)


def skip_bad(bundle: DataBundle, bad: list[tuple[str, str]]) -> None:
    """Count the files a batch lost in the bundle, or in strict mode stop with a UserError naming the first."""
    if bundle.strict:
        path, reason = bad[0]
        raise UserError([Problem("--strict-data", f"cannot read image {path}: {reason}",
                                 "fix or remove the file, or run without --strict-data to skip and count it")])
    bundle.bad.record([(path, reason) for path, reason in bad])  # pin_memory may have turned tuples into lists


class DecodedLoader:
    """Batches of images decoded once into RAM (datasets/decoded.py), made in the training process: the sampler's
    order cut into batches, each augmented at once; every image's crop and flip come from its own (seed, epoch,
    index) key, so batch size, rank count and a resume leave them unchanged. Yields what Loader yields."""

    num_workers = 0

    def __init__(self, dataset: Any, bundle: DataBundle, sampler: EpochSampler, batch_size: int, drop_last: bool):
        self.dataset, self.bundle, self.sampler = dataset, bundle, sampler
        self.batch_size, self.drop_last = batch_size, drop_last

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def shutdown(self) -> None:
        """Nothing to stop: no worker processes."""

    def __iter__(self) -> Iterator[Any]:
        from fasttrain.datasets.batch_augment import sample_keys

        order = list(self.sampler)
        keys = sample_keys(self.sampler.seed, self.sampler.epoch, order)
        last = len(self) - 1
        for k in range(last + 1):
            cut = slice(k * self.batch_size, (k + 1) * self.batch_size)
            images, targets, bad = self.dataset.batch(order[cut], keys[cut])
            if k == last and self.sampler.world == 1:  # before the last yield: a loop may stop drawing after it
                self.dataset.pass_done()
            if bad:
                skip_bad(self.bundle, bad)
            if images is not None:
                yield images, targets


def build_loaders(bundle: DataBundle, plan: Plan, *, seed: int, epoch_sampler: EpochSampler | None = None,
                  val_batch_size: int | None = None) -> tuple[Loader | DecodedLoader, Loader | DecodedLoader]:
    """(train loader, val loader). `epoch_sampler` defaults to a shuffled one from `seed` and plan.drop_last."""
    if bundle.kind == "synthetic":
        raise ValueError("synthetic data has no loaders: iterate datasets.SyntheticBatches on the device instead")
    import torch
    from torch.utils.data import DataLoader

    from fasttrain.datasets.decoded_images import DecodedImages

    if epoch_sampler is None:
        epoch_sampler = EpochSampler(len(bundle.train), seed=seed, shuffle=True, drop_last=plan.drop_last)
    val_sampler = EpochSampler(len(bundle.val), seed=seed, shuffle=False, rank=epoch_sampler.rank,
                               world=epoch_sampler.world, drop_last=False, pad=False)
    if isinstance(bundle.train, DecodedImages):
        return (DecodedLoader(bundle.train, bundle, epoch_sampler, plan.batch_size, plan.drop_last),
                DecodedLoader(bundle.val, bundle, val_sampler, val_batch_size or plan.batch_size, False))
    images = bundle.kind == "images"
    workers = plan.workers
    if workers > 0:
        quiet_fd_handoff_race()
    common: dict[str, Any] = {
        "num_workers": workers,
        "pin_memory": plan.pin_memory,
        "collate_fn": collate_images if images else None,
        "worker_init_fn": start_worker if workers > 0 else None,
        "persistent_workers": plan.persistent_workers and workers > 0,
    }
    if workers > 0 and plan.prefetch_factor:
        common["prefetch_factor"] = plan.prefetch_factor
    train = DataLoader(bundle.train, batch_size=plan.batch_size, drop_last=plan.drop_last,
                       sampler=SeededIndices(epoch_sampler) if images else epoch_sampler,
                       generator=torch.Generator().manual_seed(seed), **common)
    val = DataLoader(bundle.val, batch_size=val_batch_size or plan.batch_size, drop_last=False, sampler=val_sampler,
                     generator=torch.Generator().manual_seed(seed + 1), **common)
    return Loader(train, bundle, epoch_sampler, images), Loader(val, bundle, val_sampler, images)
