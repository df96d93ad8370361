"""The arithmetic every command shares, as pure functions (no I/O, no torch).

Sources are the field notes (docs/field-notes.md); a docstring names the note whose worked example it checks.
Units are in the names: *_bytes are bytes, *_gb are GB of 10**9 bytes... except where a
function says GiB. Memory shown to users is in GiB (2**30), like nvidia-smi and free -g.
"""
from __future__ import annotations

import math

GIB = 2**30
MIB = 2**20

# Bytes per element of a decoded image batch as the DataLoader hands it over (float32).
LOADER_BYTES_PER_ELEMENT = 4


def world_size(nodes: int, gpus_per_node: int) -> int:
    return nodes * gpus_per_node


def effective_batch(batch_size: int, accumulation_steps: int, world: int) -> int:
    """Samples that contribute to one optimizer step: per-device batch x accumulation x world size."""
    return batch_size * accumulation_steps * world


def scaled_lr(base_lr: float, base_batch: int, effective: int) -> float:
    """Linear scaling rule (Goyal et al.): LR grows with the total batch. 0.5 @ 256 -> 0.75 @ 384."""
    return base_lr * effective / base_batch


def accumulation_for(target_batch: int, largest_fitting_batch: int) -> int:
    """Steps needed to reach a target batch when only `largest_fitting_batch` fits (laptop note: 64 / 16 = 4)."""
    if largest_fitting_batch <= 0:
        raise ValueError("largest_fitting_batch must be positive")
    return max(1, math.ceil(target_batch / largest_fitting_batch))


def iterations_per_epoch(dataset_size: int, batch_size: int, world: int, drop_last: bool) -> int:
    """Optimizer-independent loader iterations per epoch on each rank (ImageNet: 1,281,167 / 256 = 5,004)."""
    per_step = batch_size * world
    return dataset_size // per_step if drop_last else math.ceil(dataset_size / per_step)


def optimizer_steps_per_epoch(iterations: int, accumulation_steps: int) -> int:
    """A final partial accumulation window still steps, so round up."""
    return math.ceil(iterations / accumulation_steps)


def batch_bytes(batch_size: int, image_size: int, channels: int = 3, overhead: float = 1.0) -> int:
    """Host bytes of one decoded batch. The A10G note: 256 x 3 x 224 x 224 x 4 = 147 MiB, ~230 MiB with overhead."""
    return int(batch_size * channels * image_size * image_size * LOADER_BYTES_PER_ELEMENT * overhead)


def loader_ram_bytes(
    workers: int, prefetch_factor: int | None, one_batch_bytes: int, processes_per_node: int = 1
) -> int:
    """Batches the loaders hold in host RAM on one machine: workers x prefetch x batch bytes, per process.

    With 0 workers the main process loads one batch at a time, so one batch is held.
    """
    if workers <= 0:
        return one_batch_bytes * processes_per_node
    return workers * (prefetch_factor or 2) * one_batch_bytes * processes_per_node


def ram_budget_bytes(host_ram_gb: float, fraction: float) -> int:
    return int(host_ram_gb * GIB * fraction)


def default_workers(cores: int, fraction: float = 0.75) -> int:
    """Leave a quarter of the cores to the main process and the OS (A10G note: 16 cores -> 12)."""
    return max(0, math.floor(cores * fraction))


def workers_within_budget(
    workers: int, prefetch_factor: int | None, one_batch_bytes: int, budget_bytes: int, processes_per_node: int = 1
) -> int:
    """The largest worker count <= `workers` whose loader RAM fits the budget (0 if even one does not)."""
    for w in range(workers, 0, -1):
        if loader_ram_bytes(w, prefetch_factor, one_batch_bytes, processes_per_node) <= budget_bytes:
            return w
    return 0


def loader_shm_bytes(
    workers: int, prefetch_factor: int | None, raw_batch_bytes: int, processes_per_node: int = 1
) -> int:
    """/dev/shm the DataLoader needs: each worker hands finished batches to the main process through shared
    memory, so up to workers x prefetch batches are in flight, plus the one being consumed, per process.
    Raw tensor bytes (no decode overhead): that is what lands in shm. 0 workers: nothing goes through shm.
    """
    if workers <= 0:
        return 0
    return (workers * (prefetch_factor or 2) + 1) * raw_batch_bytes * processes_per_node
