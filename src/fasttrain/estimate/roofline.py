"""Per-op roofline: the time of one training step from an op table and a device's ceilings.

Pure arithmetic over numpy arrays (no torch): forecast.py prices plans with it and benchmarks/calibrate.py
fits the efficiency factors with the very same function. Every aten call of the step is priced at
max(compute time, memory time) + a fixed per-op overhead, so convolutions land on the compute roof and
batch norm, activations and depthwise convolutions on the bandwidth roof, as they do on real hardware.
On a CPU a dense convolution also pays for each byte of its weights (conv_weight_s_per_byte, measured by
cpu_ceiling.py): oneDNN reorders the weights into its blocked layout on every call and reduces the weight
gradient over only batch x output pixels rows, a cost that does not shrink with the batch or the image.
Units: seconds, FLOPs, bytes, FLOP/s, bytes/s.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Optimizer state tensors per parameter (fp32).
OPTIMIZER_STATES = {"sgd": 1, "adam": 2, "adamw": 2}
# Bytes moved per parameter per optimizer step. Fused kernels (CUDA, fused=True) read p, g and the states
# once and write p and the states once: 4 x (3 + 2 x states). The foreach path (the CPU; fused off) makes one
# pass per elementwise op, counted from torch.optim's _multi_tensor_adam / _multi_tensor_sgd:
# AdamW: decay r/w 8, lerp r2w1 12, mul r/w 8, addcmul r3w1 16, sqrt 8, div 8, add eps 8, addcdiv r3w1 16 = 84;
# SGD momentum with weight decay: grad add 12, buf mul 8, buf add 12, param add 12 = 44.
UNFUSED_BYTES_PER_PARAM = {"sgd": 44, "adam": 84, "adamw": 84}
# Bulk streams (the optimizer's multi-tensor update, autocast's weight casts) run over large contiguous
# buffers and reach most of the copy bandwidth, unlike the many small activation ops the fitted
# memory_efficiency describes. 0.8 is an assumption, not a fit (at published batch sizes it is <2% of a step).
STREAM_EFFICIENCY = 0.8
# The aten calls of a convolution (cost.py records overload packet names).
CONV_OPS = frozenset({"convolution", "convolution_backward"})
# Autocast casts each fp32 weight to half precision every forward: read 4 bytes, write 2.
CAST_BYTES_PER_PARAM = 6


@dataclass(frozen=True)
class OpTable:
    """The cost.OpCost list as arrays: per-sample FLOPs and bytes, fixed bytes, depthwise mask."""

    flops: np.ndarray
    bytes_per_sample: np.ndarray
    fixed_bytes: np.ndarray
    depthwise: np.ndarray
    pointwise: np.ndarray  # ops without FLOPs: what torch.compile fuses
    conv: np.ndarray | None = None  # dense (not grouped) convolutions, forward and backward
    depthwise_backward: np.ndarray | None = None  # grouped convolutions' backward calls

    @classmethod
    def from_ops(cls, ops: list) -> OpTable:
        flops = np.array([o.flops_per_sample for o in ops], dtype=float)
        return cls(flops=flops,
                   bytes_per_sample=np.array([o.bytes_per_sample for o in ops], dtype=float),
                   fixed_bytes=np.array([o.fixed_bytes for o in ops], dtype=float),
                   depthwise=np.array([o.depthwise for o in ops], dtype=bool),
                   pointwise=flops == 0,
                   conv=np.array([o.name in CONV_OPS and not o.depthwise for o in ops], dtype=bool),
                   depthwise_backward=np.array([o.depthwise and o.name == "convolution_backward" for o in ops],
                                               dtype=bool))


@dataclass(frozen=True)
class Ceilings:
    """What one device can do and how much of it a training step gets (the calibrated factors)."""

    peak_flops: float
    bandwidth: float
    compute_efficiency: float
    memory_efficiency: float
    depthwise_efficiency: float = 1.0   # share of compute_efficiency grouped convs reach
    # The same for their backward where it differs (CPU: oneDNN's bf16 depthwise backward falls off its fast path
    # for 5x5 kernels, stride 2 and maps smaller than the kernel, ~60x slower per FLOP than the forward in
    # EfficientNet-B0 at 64 px). None: depthwise_efficiency (GPUs: the published rows cannot split the two).
    depthwise_backward_efficiency: float | None = None
    op_overhead_s: float = 0.0          # launch / dispatch cost per aten call
    compile_pointwise_bytes: float = 1.0  # share of pointwise traffic left after torch.compile fuses it
    # Seconds per byte of a dense convolution's weights (the op's fixed bytes: weight read in the forward,
    # weight read + weight gradient written in the backward), on top of its roofline time. Measured on the
    # CPU (cpu_ceiling.py: a small-output convolution, where this cost dominates); 0 on GPUs, whose fitted
    # efficiencies already hold it.
    conv_weight_s_per_byte: float = 0.0
    # GPUs: dense convolutions may run at another rate than the matmuls (PyTorch runs convolutions in TF32 on
    # Ampere and newer by default, cudnn.allow_tf32, whatever the matmul TF32 flag says). None: the matmul rate.
    conv_peak_flops: float | None = None
    conv_efficiency: float | None = None
    # GPUs: grouped convolutions do not use tensor cores; their FLOP roof is the CUDA-core fp32 peak x
    # depthwise_efficiency whatever the precision. None: peak_flops x compute_efficiency x depthwise_efficiency.
    depthwise_peak_flops: float | None = None
    # Extra memory traffic of a dense convolution, as a share of its own bytes: tensor cores read NHWC, so an
    # NCHW tensor under autocast is transposed in and out of every convolution. 0 for channels_last.
    conv_layout_bytes: float = 0.0


@dataclass(frozen=True)
class StepTime:
    seconds: float
    compute_bound_s: float   # time in ops where the FLOP roof is the limit
    memory_bound_s: float    # time in ops where the bandwidth roof is the limit
    overhead_s: float
    optimizer_s: float       # optimizer update + autocast weight casts: bulk streams

    @property
    def limiter(self) -> str:
        return "compute" if self.compute_bound_s >= self.memory_bound_s + self.optimizer_s else "memory bandwidth"


def step_time(table: OpTable, batch: int, c: Ceilings, params: int = 0, optimizer: str = "sgd",
              momentum: bool = True, compiled: bool = False, mixed_precision: bool = False,
              fused_optimizer: bool = True) -> StepTime:
    """Seconds for one forward+backward+optimizer step of `batch` samples on one device."""
    flop_rate = _flop_rates(table, c)
    compute = batch * table.flops / flop_rate
    traffic = batch * table.bytes_per_sample + table.fixed_bytes
    if c.conv_layout_bytes and table.conv is not None:
        traffic = np.where(table.conv, traffic + batch * table.bytes_per_sample * c.conv_layout_bytes, traffic)
    if compiled:
        traffic = np.where(table.pointwise, traffic * c.compile_pointwise_bytes, traffic)
    memory = traffic / (c.bandwidth * c.memory_efficiency)
    per_op = np.maximum(compute, memory)
    if c.conv_weight_s_per_byte and table.conv is not None:
        per_op = per_op + np.where(table.conv, table.fixed_bytes * c.conv_weight_s_per_byte, 0.0)
    compute_bound = float(per_op[compute >= memory].sum())
    memory_bound = float(per_op[compute < memory].sum())
    n_ops = len(table.flops) * (c.compile_pointwise_bytes if compiled else 1.0)
    overhead = n_ops * c.op_overhead_s
    states = OPTIMIZER_STATES.get(optimizer, 1) if (optimizer != "sgd" or momentum) else 0
    per_param = 4 * (3 + 2 * states) if fused_optimizer else UNFUSED_BYTES_PER_PARAM.get(optimizer, 44)
    stream_bytes = params * per_param + (params * CAST_BYTES_PER_PARAM if mixed_precision else 0)
    optimizer_s = stream_bytes / (c.bandwidth * STREAM_EFFICIENCY)
    return StepTime(compute_bound + memory_bound + overhead + optimizer_s, compute_bound, memory_bound,
                    overhead, optimizer_s)


def _flop_rates(table: OpTable, c: Ceilings) -> np.ndarray:
    """FLOP/s each op reaches: matmuls at the precision's peak, dense convolutions at theirs (TF32 by default
    on Ampere+), grouped convolutions on CUDA cores (GPUs) or at a share of the peak (CPU)."""
    rate = np.full(len(table.flops), c.peak_flops * c.compute_efficiency)
    if table.conv is not None and (c.conv_peak_flops is not None or c.conv_efficiency is not None):
        conv_rate = (c.conv_peak_flops or c.peak_flops) * (c.conv_efficiency or c.compute_efficiency)
        rate = np.where(table.conv, conv_rate, rate)
    grouped = np.where(table.depthwise, c.depthwise_efficiency, 1.0)
    if c.depthwise_backward_efficiency is not None and table.depthwise_backward is not None:
        grouped = np.where(table.depthwise_backward, c.depthwise_backward_efficiency, grouped)
    if c.depthwise_peak_flops is not None:
        return np.where(table.depthwise, c.depthwise_peak_flops * grouped, rate)
    return np.where(table.depthwise, rate * grouped, rate)


def validation_time(forward: OpTable, images: int, batch: int, c: Ceilings, *, mirrored: bool = False,
                    compiled: bool = False) -> float:
    """Seconds to validate `images` on one device at `batch`: the forward ops of a step priced as step_time
    prices them (no backward, no optimizer), per batch, the last batch partial; twice when each image is also
    validated mirrored (augment.test_flip). Pure."""
    if images <= 0 or batch <= 0:
        return 0.0
    full, rest = divmod(images, batch)
    per = full * step_time(forward, batch, c, params=0, optimizer="sgd", momentum=False, compiled=compiled).seconds
    if rest:
        per += step_time(forward, rest, c, params=0, optimizer="sgd", momentum=False, compiled=compiled).seconds
    return per * (2 if mirrored else 1)
