"""`estimate --compare`: the user's plan forecast on every shipped preset (each preset's machine and settings, the
same work) or on every GPU of the spec file, one row each, fastest first."""
from __future__ import annotations

import dataclasses
from typing import Any

from fasttrain.core.format import fmt_bytes
from fasttrain.estimate.forecast import Forecast
from fasttrain.estimate.gather import Request, forecast_for, host_warning, resolve_profile
from fasttrain.hardware import gpus
from fasttrain.hardware.report import HardwareReport
from fasttrain.profiles.schema import Profile


def compare_rows(kind: str, profile: Profile, req: Request, local: HardwareReport | None) -> list[dict[str, Any]]:
    """One forecast row per shipped preset, or per GPU of the spec file (the user's plan on each)."""
    rows = []
    if kind == "gpus":
        for name in gpus.gpu_names():
            fc, _t = forecast_for(profile, req, local, gpu_flag=name)
            rows.append(compare_row(name, fc))
    else:
        from fasttrain.profiles.files import preset_names
        # The same work on every preset: this plan's image size and epochs, each preset's own machine and settings.
        same_work = dataclasses.replace(req, sets=[], image_size_flag=profile.loader.image_size,
                                        epochs_flag=profile.optim.epochs)
        for name in preset_names():
            res = resolve_profile(name, same_work)
            fc, _t = forecast_for(res.profile, req, local, warning=host_warning(res))
            rows.append(compare_row(name, fc))
    rows.sort(key=lambda r: (r["total_s"] is None, r["total_s"] or 0.0, r["name"]))
    return rows


def compare_row(name: str, fc: Forecast) -> dict[str, Any]:
    mem = fc.memory
    if mem.fits is None:
        verdict = "unknown VRAM"
    elif mem.fits:
        verdict = f"fits {fmt_bytes(mem.total)} / {fmt_bytes(mem.capacity)}"
    else:
        verdict = f"OOM {fmt_bytes(mem.total)} / {fmt_bytes(mem.capacity)}, max batch {mem.largest_batch}"
    return {"name": name, "device": fc.device["name"], "batch_size": fc.schedule["batch_size"],
            "precision": fc.schedule["precision"], "images_per_s": fc.speed["images_per_s"],
            "epoch_s": fc.time["epoch_s"], "total_s": fc.time["total_s"], "memory_fits": mem.fits,
            "memory_verdict": verdict, "on_demand_per_run": fc.cost["on_demand_per_run"],
            "spot_per_run": fc.cost["spot_per_run"], "bottleneck": fc.bottleneck["name"],
            "unknown": fc.device["unknown"]}
