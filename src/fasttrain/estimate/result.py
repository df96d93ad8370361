"""estimate's answer, computed from what was gathered: the forecast on its target, refused like `train` when an
epoch has no full batch, the notes printed beside it (the profile's, the plan's, --batch-size auto's, the input
path's), and the payload `--json` prints, with stable keys. Pure."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fasttrain.estimate.checks import check_full_batch
from fasttrain.estimate.forecast import Forecast
from fasttrain.estimate.gather import Target, plain_notes
from fasttrain.profiles.presets import Resolved


@dataclass(frozen=True)
class Estimate:
    profile: str                                  # as given, or the preset that fits this machine
    forecast: Forecast
    target: Target
    dataset_size_source: str
    notes: list[str]
    measured: dict[str, Any] | None = None        # --measure: the forecast here beside a few real steps
    compare_rows: list[dict[str, Any]] | None = None   # --compare: one row per preset or GPU
    compare_kind: str = "presets"                 # or gpus
    budget: dict[str, Any] | None = None          # --time-budget: what it buys (budget_buys)

    def to_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"profile": self.profile, "target": self.target.where,
                                   "dataset_size_source": self.dataset_size_source,
                                   "forecast": self.forecast.to_dict(), "plan_notes": self.notes}
        if self.measured is not None:
            payload["measure"] = self.measured
        if self.compare_rows is not None:
            payload["compare"] = {"kind": self.compare_kind, "rows": self.compare_rows}
        if self.budget is not None:
            payload["time_budget"] = self.budget
        return payload


def budget_buys(budget_s: float, forecast: Forecast) -> dict[str, Any]:
    """What `train --time-budget` buys on the forecast's target: epochs (fractional: the last one may end early),
    images and optimizer steps, from the forecast's epoch time with its validation. The process's own start-up
    is left out (train measures and reserves it; on a GPU it is seconds). Pure."""
    epoch_s = forecast.time.get("epoch_s")
    if epoch_s is not None:
        epoch_s += forecast.time.get("val_s") or 0.0
    per_epoch = forecast.schedule["optimizer_steps_per_epoch"]
    images_per_epoch = forecast.schedule["iterations_per_epoch"] * forecast.schedule["batch_size"] * \
        forecast.schedule["world_size"]
    epochs = budget_s / epoch_s if epoch_s else None
    return {"budget_s": budget_s, "epoch_s": epoch_s, "epochs": epochs,
            "images": int(epochs * images_per_epoch) if epochs is not None else None,
            "optimizer_steps": int(epochs * per_epoch) if epochs is not None else None}


def estimate_result(profile: str, resolved: Resolved, forecast: Forecast, target: Target, dataset_size_source: str,
                    batch_note: str | None = None, decoding: str | None = None,
                    data_notes: list[str] | None = None) -> Estimate:
    """The forecast with its notes: the profile's (less the host-RAM what-if the bottleneck line says), the
    plan's, `batch_note` (--batch-size auto's search), `data_notes` (the flip and crop checks on --data) and
    `decoding` (train's words for data decoded once into RAM). A batch larger than the training set is refused
    here, as `train` refuses it."""
    check_full_batch(target.plan)
    notes = plain_notes(resolved) + target.plan.notes + ([batch_note] if batch_note else []) + (data_notes or [])
    if decoding:
        notes.append(f"input: {decoding}")
    return Estimate(profile, forecast, target, dataset_size_source, notes)
