"""Measure this CPU's ceilings: matmul and conv FLOP/s, copy bandwidth and the per-weight-byte cost of a small
convolution (about 0.3 s in all for `estimate`; 0.1 s with the quick windows a run's own forecast uses).

What neighbours take from the cores changes between two notebook cells, so a measurement is reused for REUSE_S
only (the plans of one `estimate --compare`), and a run measures for itself (issue 43: a kernel's second run was
forecast with the CPU as the first call found it).

A CPU has no spec sheet we could trust (turbo, SMT, cgroup quotas, neighbours), so `estimate` measures
instead. Mean time per call over short windows; the thread count, dtype and memory layout training will use.
Units: FLOP/s, bytes/s, seconds per byte.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class CpuCeiling:
    matmul_flops: float
    conv_flops: float
    bandwidth: float
    conv_weight_s_per_byte: float  # seconds per weight byte a dense conv pays beyond its FLOP time (roofline.py)
    threads: int
    dtype: str       # the matmul/conv dtype: float32, or bfloat16 for a bf16-mixed plan
    seconds: float   # how long measuring took

    @property
    def peak_flops(self) -> float:
        """The matmul rate: its FLOP count is exact (oneDNN may run a 3x3 conv as Winograd, fewer real FLOPs)."""
        return self.matmul_flops

    def to_dict(self) -> dict[str, float]:
        return asdict(self) | {"peak_flops": self.peak_flops}


# Seconds each probe is timed for. `estimate` (whose accuracy benchmarks/estimate_accuracy.py checks) takes the
# longer window; a run's own forecast only informs the dashboard and the trial's go/no-go, and every second before
# the first step counts against its time to accuracy: 20 ms windows measured 0.11 s in all instead of 0.27 s, with
# run-to-run spread of 2-5% instead of 1-7% and medians within 4% (conv weight cost 7%), 8 interleaved rounds.
WINDOW_S = 0.06
QUICK_WINDOW_S = 0.02


def _time_per_call(fn: Callable[[], object], budget_s: float = WINDOW_S) -> float:
    """Mean seconds per call over a `budget_s` window (at least 3 calls), not the best call: on a shared machine
    the time slices that neighbours take show up here just as they will in training steps."""
    fn()  # warm-up: allocation, oneDNN primitive creation
    calls, started = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed >= budget_s and calls >= 3:
            return elapsed / calls


def conv_weight_cost(seconds: float, flops: float, conv_flops: float, weight_bytes: float) -> float:
    """Seconds per weight byte from a small-output convolution probe: the time its FLOPs do not explain
    (at the large-conv rate), spread over the weight bytes the roofline charges (fwd read, bwd read + grad)."""
    return max(seconds - flops / conv_flops, 0.0) / weight_bytes


# The small-convolution probe: ResNet-50's last stage at 64 px (2x2 outputs, 8 x 2 x 2 = 32 GEMM rows per
# weight). Its forward + backward costs ~5x what its FLOPs take at the large-conv rate on this project's
# AVX512-BF16 machine: the per-weight work oneDNN does on every call (weight reorder, weight-gradient reduction).
SMALL_CONV = {"batch": 8, "channels": 512, "pixels": 2}


# Seconds a measurement is reused for: longer than one `estimate` prices its plans (--compare: 5-10 s on 2 cores),
# shorter than the time between two calls a person makes.
REUSE_S = 30.0
_MEASURED: dict[tuple[int | None, str, bool, float], tuple[float, CpuCeiling]] = {}  # key -> (monotonic s, ceiling)


def measure(threads: int | None = None, dtype: str = "float32", channels_last: bool = False,
            window_s: float = WINDOW_S, reuse_s: float = REUSE_S) -> CpuCeiling:
    """threads: what training will use (model_setup.cpu_threads); None = torch's current setting.
    dtype: the autocast dtype of the plan (bf16 matmuls run 2-4x faster on CPUs with AVX512-BF16/AMX).
    channels_last: the plan's memory layout (the small-conv probe runs in it: oneDNN's reorders differ).
    window_s: how long each probe is timed (WINDOW_S, or QUICK_WINDOW_S for a run's own forecast).
    reuse_s: the age up to which an earlier measurement of the same key is returned (0: measure now)."""
    key = (threads, dtype, channels_last, window_s)
    earlier = _MEASURED.get(key)
    if earlier is not None and time.monotonic() - earlier[0] < reuse_s:
        return earlier[1]
    ceiling = _measure_now(threads, dtype, channels_last, window_s)
    _MEASURED[key] = (time.monotonic(), ceiling)
    return ceiling


def _measure_now(threads: int | None, dtype: str, channels_last: bool, window_s: float) -> CpuCeiling:
    import torch

    from fasttrain.models.cpu_allocator import keep_freed_memory
    keep_freed_memory()  # as training runs (model_setup): otherwise each probe call faults its output in again
    started = time.perf_counter()
    previous = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _measure(started, dtype, channels_last, window_s)
    finally:
        torch.set_num_threads(previous)


def _small_conv_seconds(dtype: torch.dtype, channels_last: bool, window_s: float) -> tuple[float, float, float]:
    """Forward + backward (input and weight gradients) of a 1x1 conv on a 2x2 map. -> seconds, FLOPs, weight bytes."""
    import torch
    n, c, p = SMALL_CONV["batch"], SMALL_CONV["channels"], SMALL_CONV["pixels"]
    layout = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(n, c, p, p, dtype=dtype).to(memory_format=layout).requires_grad_()
    w = torch.randn(c, c, 1, 1, dtype=dtype).to(memory_format=layout).requires_grad_()
    grad = torch.randn(n, c, p, p, dtype=dtype).to(memory_format=layout)

    def step() -> None:
        torch.autograd.grad(torch.nn.functional.conv2d(x, w), (x, w), grad)

    forward_flops = 2 * n * p * p * c * c
    weight_bytes = 3 * w.numel() * w.element_size()  # forward: read w; backward: read w, write its gradient
    return _time_per_call(step, window_s), 3 * forward_flops, weight_bytes


def _measure(started: float, dtype_name: str, channels_last: bool, window_s: float) -> CpuCeiling:
    import torch
    dtype = getattr(torch, dtype_name)
    with torch.no_grad():
        n = 512
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        matmul = 2 * n**3 / _time_per_call(lambda: a @ b, window_s)
        x = torch.randn(8, 64, 28, 28, dtype=dtype)
        w = torch.randn(64, 64, 3, 3, dtype=dtype)
        conv_flops = 2 * 8 * 64 * 28 * 28 * 64 * 9
        conv = conv_flops / _time_per_call(lambda: torch.nn.functional.conv2d(x, w, padding=1), window_s)
        src = torch.randn(8 * 2**20 // 4 * 4)  # 32 MiB: well past the caches
        dst = torch.empty_like(src)
        bandwidth = 2 * src.numel() * 4 / _time_per_call(lambda: dst.copy_(src), window_s)  # read + write
    seconds, flops, weight_bytes = _small_conv_seconds(dtype, channels_last, window_s)
    weight_cost = conv_weight_cost(seconds, flops, conv, weight_bytes)
    return CpuCeiling(matmul, conv, bandwidth, weight_cost, torch.get_num_threads(), dtype_name,
                      time.perf_counter() - started)
