"""What the benches leave in the measurement cache (tuning/store.py), where doctor, estimate and train's verdict
read it: no command then suggests a setting measured slower here."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fasttrain.bench.loader_choice import best_per_workers
from fasttrain.bench.loader_sweep import Point
from fasttrain.core.format import plural

if TYPE_CHECKING:
    from fasttrain.hardware.report import HardwareReport
    from fasttrain.plan import Plan
    from fasttrain.tuning.store import Measurement, SettingValue, TrialKey


# bench setting -> (tuning setting, value) in the measurement cache (tuning/store.py).
MEASURED_AS: dict[str, tuple[str, SettingValue]] = {
    "bf16": ("precision", "bf16-mixed"),
    "fp16": ("precision", "fp16-mixed"),
    "channels_last": ("channels_last", True),
    "tf32": ("tf32", True),
    "cudnn_benchmark": ("cudnn_benchmark", True),
    "compile": ("compile", True),
    "fused_optimizer": ("fused_optimizer", True),
}


def measurements_from_rows(rows: list[dict[str, Any]], today: str) -> list[Measurement]:
    """The measured rows as tuning Measurements ("compile: 0.93x here (bench speedups, DATE)"). Pure."""
    from fasttrain.tuning.store import Measurement

    return [
        Measurement(*MEASURED_AS[r["setting"]], round(float(r["speedup"]), 3), "bench speedups", today)
        for r in rows
        if r.get("status") == "measured" and r["setting"] in MEASURED_AS
    ]


def workers_measurement(points: list[Point], choice: Point, planned: int, today: str) -> Measurement:
    """What `bench loader` leaves in the measurement cache (tuning/store.py) for doctor and train's plan: the
    recommended worker count and its rate over the count the plan would have used (the nearest one measured). Pure."""
    from fasttrain.tuning.store import Measurement

    per = best_per_workers(points)
    base = per[min(per, key=lambda w: (abs(w - planned), w))]
    return Measurement(
        "workers",
        choice.workers,
        round(choice.images_per_s / max(base.images_per_s, 1e-9), 2),
        "bench loader",
        today,
        f"vs {plural(base.workers, 'worker')}, the plan's rule",
    )


def remember_speedups(result: dict[str, Any], report: HardwareReport, model: str) -> None:
    """What bench speedups measured goes to the measurement cache, where doctor, estimate and train's verdict
    read it (tuning/store.py): no command then suggests a setting measured slower here."""
    from fasttrain.tuning.store import TrialKey, machine_id

    found = measurements_from_rows(result["rows"], _today())
    if not found:
        return
    key = TrialKey(
        machine_id(report),
        model,
        "synthetic",
        result["image_size"],
        result["batch_size"],
        report.torch.version or "unknown",
    )
    _record(key, found)


def remember_loader(
    points: list[Point], choice: Point, kind: str, plan: Plan, report: HardwareReport
) -> dict[str, Any]:
    """The recommended worker count goes to the measurement cache, keyed by this machine and torch, the data kind,
    image size and batch (no model): train's plan and doctor read it through tuning/advice.workers_advice, the
    same code that gives here the count they will use -> {workers, text, recorded}."""
    from fasttrain.tuning.advice import workers_advice
    from fasttrain.tuning.store import loader_key

    found = workers_measurement(points, choice, plan.workers, _today())
    recorded = _record(loader_key(report, kind, plan.image_size, plan.batch_size), [found])
    advice = workers_advice([found], plan.workers, report.cores)
    return {"workers": advice.value, "text": advice.text, "recorded": recorded}


def _record(key: TrialKey, found: list[Measurement]) -> bool:
    """The one place the benches write the cache (tuning/store.record) -> whether it was written. An unusable cache
    directory is no error: the result file still has every figure."""
    from fasttrain.core.errors import UserError
    from fasttrain.tuning.store import record

    try:
        record(key, measurements=found)
    except UserError:
        return False
    return True


def _today() -> str:
    from datetime import date

    return date.today().isoformat()
