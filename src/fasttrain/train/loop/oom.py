"""Out of memory: recognising it and giving the memory back, for the loop's back-off and the batch search.

torch is imported inside the functions: batch_search (imported by the commands) uses this module too.
"""
from __future__ import annotations

import gc
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# Lower-cased fragments of allocator messages that mean "out of memory" on builds and backends that raise a
# plain RuntimeError rather than torch.OutOfMemoryError: CUDA's caching allocator, the CPU allocator
# ("DefaultCPUAllocator: can't allocate memory"), and cuBLAS / cuDNN failing to allocate their workspaces.
OOM_MESSAGES = ("out of memory", "can't allocate memory", "cublas_status_alloc_failed", "cudnn_status_alloc_failed")


def is_out_of_memory(exc: BaseException) -> bool:
    """torch.OutOfMemoryError / torch.cuda.OutOfMemoryError, or a RuntimeError whose message says so."""
    import torch

    oom_types = tuple(t for t in (getattr(torch, "OutOfMemoryError", None),
                                  getattr(torch.cuda, "OutOfMemoryError", None)) if t is not None)
    if oom_types and isinstance(exc, oom_types):
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(fragment in text for fragment in OOM_MESSAGES)


def free_device_memory(device: torch.device | str, *, reset_peak_stats: bool = False) -> None:
    """After an OOM: the failed step's tensors are unreachable once its frames are gone; collect them and hand
    the allocator's cached blocks back so the retry starts from the same free memory as before.
    `device`: a torch.device or its type name ("cuda", "cpu"). `reset_peak_stats`: also restart CUDA's peak
    counter, so the next measurement (a batch-search trial) reports its own peak."""
    gc.collect()
    if getattr(device, "type", device) != "cuda":
        return
    import torch

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    if reset_peak_stats:
        torch.cuda.reset_peak_memory_stats()
