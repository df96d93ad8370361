"""The calibrated efficiency factors (data/calibration.json) turned into roofline Ceilings for a device.

benchmarks/calibrate.py writes the JSON (GPU factors fitted to published throughputs, CPU factors to
training steps measured on this machine); this module only reads it. No torch import.
"""
from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fasttrain.hardware.gpus import GpuSpec
from fasttrain.estimate.roofline import Ceilings


@functools.lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    path = resources.files("fasttrain") / "data" / "calibration.json"
    return json.loads(path.read_text(encoding="utf-8"))


def group_key(precision: str, tf32: bool, channels_last: bool) -> str:
    """The compute-efficiency group: precision family x memory layout, as the published rows split them."""
    if precision in ("fp16-mixed", "bf16-mixed"):
        family = "amp"
    else:
        family = "tf32" if tf32 else "fp32"
    return f"{family}-{'channels_last' if channels_last else 'nchw'}"


@dataclass(frozen=True)
class DeviceCeilings:
    """Ceilings when every number is known; otherwise `unknown` lists what the spec file lacks."""

    name: str
    kind: str                        # "gpu" or "cpu"
    ceilings: Ceilings | None
    peak_flops: float | None         # the dtype's peak, for MFU
    memory_bytes: int | None
    unknown: list[str]
    group: str
    multi_device_efficiency: float
    source: str


def gpu_ceilings(spec: GpuSpec, precision: str, tf32: bool, channels_last: bool,
                 factors: dict[str, Any] | None = None) -> DeviceCeilings:
    g = (factors or load())["gpu"]
    tf32_used = tf32 and spec.tf32_supported and precision == "fp32"
    group = group_key(precision, tf32_used, channels_last)
    # Layouts without published rows (fp32/tf32 channels_last) take the NCHW factor: no tensor-core gain to show.
    eff = g["compute_efficiency"].get(group) or g["compute_efficiency"][group.split("-")[0] + "-nchw"]
    peak = spec.peak_flops(precision, tf32_used)
    unknown = []
    if peak is None:
        unknown.append(f"{spec.peak_field(precision, tf32_used)} of {spec.name}")
    if spec.bandwidth_bytes_per_s is None:
        unknown.append(f"bandwidth_gbps of {spec.name}")
    ceilings = None
    if not unknown:
        ceilings = Ceilings(peak_flops=peak, bandwidth=spec.bandwidth_bytes_per_s, compute_efficiency=eff,
                            memory_efficiency=g["memory_efficiency"], depthwise_efficiency=g["depthwise_efficiency"],
                            op_overhead_s=g["op_overhead_s"], compile_pointwise_bytes=g["compile_pointwise_bytes"])
    return DeviceCeilings(spec.name, "gpu", ceilings, peak, spec.memory_bytes, unknown, group,
                          g["multi_gpu_efficiency"], spec.source)


def cpu_ceilings(matmul_flops: float, bandwidth: float, ram_bytes: int | None,
                 factors: dict[str, Any] | None = None, conv_weight_s_per_byte: float = 0.0) -> DeviceCeilings:
    """A CPU's ceilings are measured here (cpu_ceiling.py); the factors come from steps measured here too.
    conv_weight_s_per_byte: the small-conv probe's per-weight-byte cost, used as measured (roofline.py)."""
    c = (factors or load())["cpu"]
    ceilings = Ceilings(peak_flops=matmul_flops, bandwidth=bandwidth, compute_efficiency=c["compute_efficiency"],
                        memory_efficiency=c["memory_efficiency"], depthwise_efficiency=c["depthwise_efficiency"],
                        op_overhead_s=c["op_overhead_s"], compile_pointwise_bytes=1.0,
                        conv_weight_s_per_byte=conv_weight_s_per_byte,
                        depthwise_backward_efficiency=c.get("depthwise_backward_efficiency"))
    return DeviceCeilings("CPU (measured here)", "cpu", ceilings, matmul_flops, ram_bytes, [], "fp32-nchw", 1.0,
                          "fp32 matmul and copy bandwidth measured by fasttrain on this machine")
