"""Helpers for the CUDA tests (tests/test_gpu_*.py, marker `gpu`): a small GPU profile, run-folder readers,
a real allocator limit. The tests drive `fasttrain` through its command line and read what a run writes
(metrics.jsonl, summary.json, checkpoints), so they survive refactors of the loop's internals.
Nothing here touches CUDA at import time: on a machine without a GPU the tests are collected and skipped.
"""
from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

# A GPU run kept small: 64 px, batch 16, 2 epochs, 2 pinned-memory workers; fp16 with every speed flag on.
# hardware.gpu stays null, so `estimate` and the run's forecast use the GPU at hand (not a preset's GPU).
BASE_GPU_PROFILE: dict[str, Any] = {
    "description": "fasttrain GPU tests: small and quick",
    "hardware": {"gpu": None, "host_ram_gb": 16, "cpu_cores": 4},
    "loader": {"batch_size": 16, "num_workers": 2, "prefetch_factor": 2, "pin_memory": True,
               "persistent_workers": False, "drop_last": True, "image_size": 64},
    "speed": {"precision": "fp16-mixed", "channels_last": True, "compile": False, "tf32": True,
              "cudnn_benchmark": True, "fused_optimizer": True},
    "optim": {"optimizer": "sgd", "base_lr": 0.1, "base_batch": 256, "momentum": 0.9, "weight_decay": 0.0001,
              "epochs": 2, "warmup_epochs": 0, "schedule": "cosine"},
}


def gpu_profile(**sections: dict[str, Any]) -> dict[str, Any]:
    """BASE_GPU_PROFILE with some keys of some sections replaced, e.g. speed={"precision": "bf16-mixed"}."""
    data = json.loads(json.dumps(BASE_GPU_PROFILE))
    for section, values in sections.items():
        data.setdefault(section, {}).update(values)
    return data


def write_profile(path: Path, **sections: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(gpu_profile(**sections), sort_keys=False))
    return path


# A profile for bit-for-bit comparisons: fp32 (or as given), eager, no autotuning, no TF32, no worker processes.
DETERMINISTIC = {
    "loader": {"num_workers": 0, "prefetch_factor": None, "persistent_workers": False, "batch_size": 4,
               "image_size": 32},
    "speed": {"precision": "fp32", "compile": False, "tf32": False, "cudnn_benchmark": False},
}


def tf32_expected(major: int) -> bool:
    """What a plan that asks for TF32 gets on a GPU of compute capability major.x: TF32 needs Ampere (8.0) or newer,
    so a T4 (7.5) or a V100 (7.0) plans it off."""
    return major >= 8


def rows(run: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def step_rows(run: Path) -> list[dict[str, Any]]:
    return [r for r in rows(run) if r.get("kind") == "step"]


def epoch_rows(run: Path) -> list[dict[str, Any]]:
    return [r for r in rows(run) if r.get("kind") == "epoch"]


def summary(run: Path) -> dict[str, Any]:
    return json.loads((run / "summary.json").read_text())


def checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint's payload, its weights whole (a last.pt of the best epoch keeps them in model.safetensors)."""
    import torch

    from fasttrain.models.saved import resolve_references
    payload = torch.load(path, map_location="cpu", weights_only=False)
    resolve_references(payload, Path(path).parent)
    return payload


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def all_finite(state: dict[str, Any]) -> bool:
    import torch
    return all(bool(torch.isfinite(t).all()) for t in state.values()
               if torch.is_tensor(t) and t.is_floating_point())


def keys_like(row: dict[str, Any], *words: str) -> dict[str, Any]:
    """The entries of `row` whose key holds every word (e.g. "gpu", "util"): telemetry key names may be
    renamed by a refactor, the readings they carry must stay."""
    return {k: v for k, v in row.items() if all(w in k for w in words)}


@contextlib.contextmanager
def allocator_limit(limit_bytes: int, device: int = 0) -> Iterator[int]:
    """Cap this process's CUDA caching allocator at `limit_bytes` (torch.cuda.set_per_process_memory_fraction):
    an allocation past it raises the allocator's real torch.OutOfMemoryError, on any card size (80 or 141 GB).
    Restored (fraction 1.0) and the cache emptied afterwards. -> the limit in bytes."""
    import gc

    import torch
    total = torch.cuda.get_device_properties(device).total_memory
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    torch.cuda.set_per_process_memory_fraction(min(1.0, limit_bytes / total), device)
    try:
        yield limit_bytes
    finally:
        gc.collect()
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(1.0, device)


@contextlib.contextmanager
def device_nearly_full(free_bytes: int, device: int = 0) -> Iterator[int]:
    """Fill the card with one ballast tensor so only about `free_bytes` stay free: later allocations past that
    fail in cudaMalloc itself (the allocator frees its cache, retries, then raises OutOfMemoryError), the way a
    too-large batch fails on a real card. -> the bytes left free."""
    import gc

    import torch
    gc.collect()
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    free, _ = torch.cuda.mem_get_info(device)
    ballast_bytes = free - free_bytes
    if ballast_bytes <= 0:
        raise RuntimeError(f"only {free / 2**30:.1f} GiB free on the GPU; the test needs more than "
                           f"{free_bytes / 2**30:.1f} GiB to fill")
    ballast = torch.empty(ballast_bytes, dtype=torch.uint8, device=f"cuda:{device}")
    try:
        yield int(torch.cuda.mem_get_info(device)[0])
    finally:
        del ballast
        gc.collect()
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


@contextlib.contextmanager
def memory_limit(kind: str, limit_bytes: int) -> Iterator[int]:
    """kind "fraction": allocator_limit; "ballast": device_nearly_full. -> the limit in bytes."""
    manager = allocator_limit(limit_bytes) if kind == "fraction" else device_nearly_full(limit_bytes)
    with manager as limit:
        yield limit


@contextlib.contextmanager
def syncs_raise() -> Iterator[None]:
    """Within: torch's sync debug mode "error": an implicit host-device sync (a blocking copy, `.item()`, a
    `float()` of a device tensor) raises. Enter it only after the set-up: moving a model to the GPU (building an
    engine) and copying a batch there are blocking copies and raise in it. Reset to 0 on leaving, also after a
    failure, so the next test runs unchecked."""
    import torch
    torch.cuda.synchronize()  # the set-up's own work ends outside the check
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)


def release_cuda() -> None:
    """Between in-process runs: hand cached blocks back so the next test starts from the same free memory."""
    import gc

    import torch
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
