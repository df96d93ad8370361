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

from fasttrain.estimate.roofline import Ceilings
from fasttrain.hardware.gpus import GpuSpec, standin_name, with_standin_peaks


@functools.lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    path = resources.files("fasttrain") / "data" / "calibration.json"
    return json.loads(path.read_text(encoding="utf-8"))


def group_key(precision: str, tf32: bool, channels_last: bool) -> str:
    """The compute-efficiency group: precision family x memory layout, as the published rows split them."""
    family = "amp" if precision in ("fp16-mixed", "bf16-mixed") else "tf32" if tf32 else "fp32"
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
    peaks_from: str = ""             # another GPU whose peaks stand in for unpublished ones (data/gpu_standins.csv)


def precision_family(precision: str, tf32_used: bool) -> str:
    """The compute-efficiency family of the matmuls: amp (tensor cores in fp16/bf16), tf32, or fp32."""
    if precision in ("fp16-mixed", "bf16-mixed"):
        return "amp"
    return "tf32" if tf32_used else "fp32"


def gpu_ceilings(spec: GpuSpec, precision: str, tf32: bool, channels_last: bool,
                 factors: dict[str, Any] | None = None) -> DeviceCeilings:
    """Per-op ceilings of one GPU for a plan (roofline.Ceilings): matmuls at the precision's peak; dense
    convolutions in TF32 on Ampere+ even in an fp32 plan (cudnn.allow_tf32 is on by default in PyTorch);
    grouped convolutions at the CUDA-core fp32 peak (no tensor cores); memory-bound ops at the bandwidth,
    with their own efficiency under autocast; NCHW under autocast pays a transpose around each convolution."""
    g = (factors or load())["gpu"]
    spec, standin = with_standin_peaks(spec)
    amp = precision in ("fp16-mixed", "bf16-mixed")
    tf32_used = tf32 and spec.tf32_supported and precision == "fp32"
    group = group_key(precision, tf32_used, channels_last)
    eff = g["compute_efficiency"]
    peak = spec.peak_flops(precision, tf32_used)
    bandwidth = spec.bandwidth_bytes_per_s
    conv_tf32 = not amp and spec.tf32_supported      # PyTorch's default for convolutions
    conv_peak = spec.peak_flops("fp32", True) if conv_tf32 else peak
    unknown = []
    for value, field_name in ((peak, spec.peak_field(precision, tf32_used)),
                              (conv_peak, spec.peak_field("fp32", True)),
                              (spec.peak_flops("fp32"), "fp32_tflops"),
                              (bandwidth, "bandwidth_gbps")):
        if value is None and f"{field_name} of {spec.name}" not in unknown:
            unknown.append(f"{field_name} of {spec.name}")
    ceilings = None
    if not unknown and peak is not None and bandwidth is not None:  # the two `is not None`: for the type checker
        family = precision_family(precision, tf32_used)
        layout = 0.0 if channels_last or not amp else g["nchw_amp_conv_bytes"]
        mem = g.get("amp_memory_efficiency", g["memory_efficiency"]) if amp else g["memory_efficiency"]
        ceilings = Ceilings(peak_flops=peak, bandwidth=bandwidth, compute_efficiency=eff[family],
                            memory_efficiency=mem, depthwise_efficiency=g["depthwise_efficiency"],
                            op_overhead_s=g["op_overhead_s"], compile_pointwise_bytes=g["compile_pointwise_bytes"],
                            conv_peak_flops=conv_peak, conv_efficiency=eff["tf32" if conv_tf32 else family],
                            depthwise_peak_flops=spec.peak_flops("fp32"), conv_layout_bytes=layout)
    return DeviceCeilings(spec.name, "gpu", ceilings, peak, spec.memory_bytes, unknown, group,
                          g["multi_gpu_efficiency"], f"{spec.source}; {standin}" if standin else spec.source,
                          standin_name(spec.name) if standin else "")


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
