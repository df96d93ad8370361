"""Measure this CPU's ceilings once per process: fp32 matmul and conv FLOP/s, copy bandwidth (well under 1 s).

A CPU has no spec sheet we could trust (turbo, SMT, cgroup quotas, neighbours), so `estimate` measures
instead. Mean time per call over short windows; the thread count and dtype training will use.
Units: FLOP/s and bytes/s.
"""
from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CpuCeiling:
    matmul_flops: float
    conv_flops: float
    bandwidth: float
    threads: int
    dtype: str       # the matmul/conv dtype: float32, or bfloat16 for a bf16-mixed plan
    seconds: float   # how long measuring took

    @property
    def peak_flops(self) -> float:
        """The matmul rate: its FLOP count is exact (oneDNN may run a 3x3 conv as Winograd, fewer real FLOPs)."""
        return self.matmul_flops

    def to_dict(self) -> dict[str, float]:
        return asdict(self) | {"peak_flops": self.peak_flops}


def _time_per_call(fn, budget_s: float = 0.06) -> float:
    """Mean seconds per call over a ~60 ms window, not the best call: on a shared machine the time slices that
    neighbours take show up here just as they will in training steps."""
    fn()  # warm-up: allocation, oneDNN primitive creation
    calls, started = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= budget_s and calls >= 3:
            return elapsed / calls


@functools.lru_cache(maxsize=4)
def measure(threads: int | None = None, dtype: str = "float32") -> CpuCeiling:
    """threads: what training will use (model_setup.cpu_threads); None = torch's current setting.
    dtype: the autocast dtype of the plan (bf16 matmuls run 2-4x faster on CPUs with AVX512-BF16/AMX)."""
    import torch
    started = time.perf_counter()
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _measure(started, dtype)
    finally:
        torch.set_num_threads(previous)


def _measure(started: float, dtype_name: str) -> CpuCeiling:
    import torch
    dtype = getattr(torch, dtype_name)
    with torch.no_grad():
        n = 512
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        matmul = 2 * n**3 / _time_per_call(lambda: a @ b)
        x = torch.randn(8, 64, 28, 28, dtype=dtype)
        w = torch.randn(64, 64, 3, 3, dtype=dtype)
        conv_flops = 2 * 8 * 64 * 28 * 28 * 64 * 9
        conv = conv_flops / _time_per_call(lambda: torch.nn.functional.conv2d(x, w, padding=1))
        src = torch.randn(8 * 2**20 // 4 * 4)  # 32 MiB: well past the caches
        dst = torch.empty_like(src)
        bandwidth = 2 * src.numel() * 4 / _time_per_call(lambda: dst.copy_(src))  # read + write
    return CpuCeiling(matmul, conv, bandwidth, torch.get_num_threads(), dtype_name, time.perf_counter() - started)
