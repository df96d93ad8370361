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

    def to_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {"profile": self.profile, "target": self.target.where,
                                   "dataset_size_source": self.dataset_size_source,
                                   "forecast": self.forecast.to_dict(), "plan_notes": self.notes}
        if self.measured is not None:
            payload["measure"] = self.measured
        if self.compare_rows is not None:
            payload["compare"] = {"kind": self.compare_kind, "rows": self.compare_rows}
        return payload


def estimate_result(profile: str, resolved: Resolved, forecast: Forecast, target: Target, dataset_size_source: str,
                    batch_note: str | None = None, decoding: str | None = None) -> Estimate:
    """The forecast with its notes: the profile's (less the host-RAM what-if the bottleneck line says), the
    plan's, `batch_note` (--batch-size auto's search), and `decoding` (train's words for data decoded once into
    RAM). A batch larger than the training set is refused here, as `train` refuses it."""
    check_full_batch(target.plan)
    notes = plain_notes(resolved) + target.plan.notes + ([batch_note] if batch_note else [])
    if decoding:
        notes.append(f"input: {decoding}")
    return Estimate(profile, forecast, target, dataset_size_source, notes)
