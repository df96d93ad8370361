"""Telemetry: what each training step really spent its time on, and the verdict on it.

The step recorder (data wait, host-to-device, compute, throughput, memory) with rolling and per-epoch
statistics, the GPU and host readers behind it, and the plain-words bottleneck verdict with the
settings worth changing.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "Telemetry": "recorder",
    "StepRecord": "recorder",
    "GpuReader": "readers",
    "host_sample": "readers",
    "Verdict": "verdict",
    "diagnose": "verdict",
    "assess": "verdict",
})
