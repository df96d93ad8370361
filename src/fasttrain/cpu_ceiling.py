"""Measure this CPU's ceilings once per process: fp32 matmul and conv FLOP/s, copy bandwidth (well under 1 s).

A CPU has no spec sheet we could trust (turbo, SMT, cgroup quotas, neighbours), so `estimate` measures
instead. Medians of a few short repeats; the same thread count torch will train with.
Units: FLOP/s and bytes/s.
"""
from __future__ import annotations

import functools
import statistics
import time
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class CpuCeiling:
    matmul_flops: float
    conv_flops: float
    bandwidth: float
    threads: int
    seconds: float   # how long measuring took

    @property
    def peak_flops(self) -> float:
        """The matmul rate: its FLOP count is exact (oneDNN may run a 3x3 conv as Winograd, fewer real FLOPs)."""
        return self.matmul_flops

    def to_dict(self) -> dict[str, float]:
        return asdict(self) | {"peak_flops": self.peak_flops}


def _median_time(fn, repeats: int) -> float:
    fn()  # warm-up: allocation, oneDNN primitive creation
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    # Median, not best: a shared machine's training steps see the same neighbours the ceiling sees.
    return statistics.median(times)


@functools.lru_cache(maxsize=1)
def measure() -> CpuCeiling:
    import torch
    started = time.perf_counter()
    with torch.no_grad():
        n = 512
        a, b = torch.randn(n, n), torch.randn(n, n)
        matmul = 2 * n**3 / _median_time(lambda: a @ b, 15)
        x = torch.randn(8, 64, 28, 28)
        w = torch.randn(64, 64, 3, 3)
        conv_flops = 2 * 8 * 64 * 28 * 28 * 64 * 9
        conv = conv_flops / _median_time(lambda: torch.nn.functional.conv2d(x, w, padding=1), 9)
        src = torch.randn(8 * 2**20 // 4 * 4)  # 32 MiB: well past the caches
        dst = torch.empty_like(src)
        bandwidth = 2 * src.numel() * 4 / _median_time(lambda: dst.copy_(src), 9)  # read + write
    return CpuCeiling(matmul, conv, bandwidth, torch.get_num_threads(), time.perf_counter() - started)
