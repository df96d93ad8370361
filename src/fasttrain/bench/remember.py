"""What the benches leave in the measurement cache (tuning/store.py), where doctor, estimate and train's verdict
read it: no command then suggests a setting measured slower here."""
from __future__ import annotations

from typing import Any

from fasttrain.bench.loader_choice import best_per_workers
from fasttrain.bench.loader_sweep import Point
from fasttrain.core.format import plural


# bench setting -> (tuning setting, value) in the measurement cache (tuning/store.py).
MEASURED_AS = {"bf16": ("precision", "bf16-mixed"), "fp16": ("precision", "fp16-mixed"),
               "channels_last": ("channels_last", True), "tf32": ("tf32", True),
               "cudnn_benchmark": ("cudnn_benchmark", True), "compile": ("compile", True),
               "fused_optimizer": ("fused_optimizer", True)}


def measurements_from_rows(rows: list[dict[str, Any]], today: str) -> list[Any]:
    """The measured rows as tuning Measurements ("compile: 0.93x here (bench speedups, DATE)"). Pure."""
    from fasttrain.tuning.store import Measurement

    return [Measurement(*MEASURED_AS[r["setting"]], round(float(r["speedup"]), 3), "bench speedups", today)
            for r in rows if r.get("status") == "measured" and r["setting"] in MEASURED_AS]


def workers_measurement(points: list[Point], choice: Point, planned: int, today: str) -> Any:
    """What `bench loader` leaves in the measurement cache (tuning/store.py) for doctor and train's plan: the
    recommended worker count and its rate over the count the plan would have used (the nearest one measured). Pure."""
    from fasttrain.tuning.store import Measurement

    per = best_per_workers(points)
    base = per[min(per, key=lambda w: (abs(w - planned), w))]
    return Measurement("workers", choice.workers, round(choice.images_per_s / max(base.images_per_s, 1e-9), 2),
                       "bench loader", today, f"vs {plural(base.workers, 'worker')}, the plan's rule")
