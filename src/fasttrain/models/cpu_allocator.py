"""The CPU allocator setting training runs with, applied wherever CPU speed is measured or used.

PyTorch has no caching allocator on the CPU: every activation and gradient is a fresh malloc. glibc's defaults
hand large freed blocks back to the kernel, so each step faulted its memory in again (see keep_freed_memory).
Training (model_setup.configure_backends) and the ceiling probe of `estimate` (cpu_ceiling) both call it, so
the forecast measures the machine the way the run will use it.
"""
from __future__ import annotations

import os

# glibc mallopt() parameters (malloc.h) and the largest trim threshold it takes (an int, bytes).
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_TRIM_THRESHOLD_MAX = 2**31 - 1


def keep_freed_memory() -> str | None:
    """Make glibc malloc keep the memory a training step frees for the next step (the CPU has no caching
    allocator: every activation and gradient is a fresh malloc).

    By default glibc mmaps each block above a threshold that moves with the process's history (a bigger
    block freed earlier raises it) and hands freed heap tops back to the kernel, so every step faulted its
    activations in again: 3,400-8,000 minor page faults and 7-20 ms of kernel time per 55-76 ms tiny_cnn@32
    b64 step on the 2-core machine, different in every process; without them the step took 45-50 ms
    (docs/benchmarks.md, `estimate --measure` vs train). Memory is still bounded by the steps' own peak.
    Skipped off glibc and when the user tunes malloc (GLIBC_TUNABLES, MALLOC_*_). -> a note, or None."""
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc" or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", "") \
            or any(k.startswith("MALLOC_") and k.endswith("_") for k in os.environ):
        return None
    try:
        libc = ctypes.CDLL(None)
        ok = libc.mallopt(_M_MMAP_MAX, 0) and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_MAX)
    except (OSError, AttributeError):
        return None
    return ("CPU allocator: freed tensor memory kept for the next step (glibc: no mmap per block, no trim "
            "below 2 GiB; GLIBC_TUNABLES=glibc.malloc.* overrides)") if ok else None
