"""Estimate: a run's time, memory, bottleneck and cost before it starts.

Model cost counted on the meta device, a per-op roofline over a GPU's published peaks (or this CPU's
measured ones) with fitted efficiency factors, memory and host-RAM budgets, the loader's measured
decode rate, and the tables `estimate` prints.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "Forecast": "forecast",
    "LoaderSample": "forecast",
    "MemoryBudget": "memory",
    "HostBudget": "memory",
    "bottleneck": "forecast",
    "Request": "gather",
    "Target": "gather",
    "forecast_for": "gather",
    "target_for": "gather",
    "local_report": "gather",
    "ModelCost": "cost",
    "OpCost": "cost",
    "Ceilings": "roofline",
    "StepTime": "roofline",
    "step_time": "roofline",
    "DeviceCeilings": "calibration",
    "gpu_ceilings": "calibration",
    "cpu_ceilings": "calibration",
    "render_forecast": "view",
    "render_compare": "view",
    "render_measure": "view",
})
