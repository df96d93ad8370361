"""One epoch's row (metrics.jsonl's "epoch" lines, summary.json's history, a checkpoint's history): its training
totals (epoch_sums.py), its validation (validation.py), the LR after the epoch, the time since launch (time to
accuracy), files skipped so far and telemetry's epoch figures. `EpochRow.to_json()` is the one place that writes it,
`EpochRow.from_json()` the one that reads it back (a resume, `fasttrain report`, a row of an earlier fasttrain)."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fasttrain.core.json_record import OPTIONAL, record_from_json, record_json

TELEMETRY = "telemetry_"  # the prefix of telemetry's keys in the row


@dataclass(frozen=True)
class EpochTelemetry:
    """Telemetry's totals for the epoch (telemetry/stats.py epoch_totals): seconds, rates, the time split as
    fractions of the step, GPU means and peak (None off a GPU)."""

    batches: int = 0
    images: int = 0
    time_s: float = 0.0
    images_per_s: float | None = None
    it_per_s: float | None = None
    data_wait_s: float = 0.0
    h2d_s: float = 0.0
    compute_s: float = 0.0
    data_wait_fraction: float | None = None
    h2d_fraction: float | None = None
    compute_fraction: float | None = None
    train_loss: float | None = None
    skipped_steps: int = 0
    gpu_util_mean_pct: float | None = None
    gpu_power_mean_w: float | None = None
    gpu_mem_peak_bytes: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return record_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EpochTelemetry:
        return record_from_json(cls, data)


@dataclass(frozen=True)
class EpochRow:
    """An epoch's figures. The val_* fields are None together when the epoch was not validated (then the JSON has
    none of their keys); elapsed_s, bad_files and telemetry are left out of the JSON while None."""

    epoch: int = 0                            # counts from 1
    train_loss: float | None = None           # mean over the finite batches
    train_nonfinite_batches: int = 0
    train_images: int = 0
    train_s: float = 0.0                      # seconds of the training pass
    val_loss: float | None = None
    val_acc1: float | None = None             # 0..1
    val_acc5: float | None = None             # None under 5 classes
    val_images: int | None = None             # None: not validated
    val_s: float | None = None
    lr: float | None = None                   # after the epoch
    elapsed_s: float | None = field(default=None, metadata=OPTIONAL)  # from launch to the end of the validation
    bad_files: int | None = field(default=None, metadata=OPTIONAL)   # unreadable files skipped so far
    telemetry: EpochTelemetry | None = None   # written as telemetry_* keys
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this fasttrain does not know (kept as read)

    @property
    def validated(self) -> bool:
        return self.val_images is not None

    def to_json(self) -> dict[str, Any]:
        """The row as metrics.jsonl and summary.json's history hold it, keys in this order."""
        row = record_json(dataclasses.replace(self, telemetry=None, extra={}))
        if not self.validated:
            for key in ("val_loss", "val_acc1", "val_acc5", "val_images", "val_s"):
                del row[key]
        del row["telemetry"]
        if self.telemetry is not None:
            row.update({TELEMETRY + k: v for k, v in self.telemetry.to_json().items()})
        row.update(self.extra)
        return row

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EpochRow:
        """A row of any fasttrain's metrics.jsonl / summary.json / checkpoint; missing keys keep their defaults."""
        figures = {k.removeprefix(TELEMETRY): v for k, v in data.items() if k.startswith(TELEMETRY)}
        rest = {k: v for k, v in data.items() if not k.startswith(TELEMETRY)}
        row = record_from_json(cls, rest)
        return dataclasses.replace(row, telemetry=EpochTelemetry.from_json(figures)) if figures else row

    @classmethod
    def build(cls, epoch: int, train: Mapping[str, float | int], val: Mapping[str, float | int | None] | None,
              lr: float, *, launched_at: float | None, bad_files: int | None,
              telemetry: Mapping[str, float | int | None] | None) -> EpochRow:
        """The row of epoch `epoch` (from 1): `train` from EpochSums.totals(), `val` from evaluate() (None: not
        validated), the LR after the epoch; `launched_at`: time.time() at the process start, or None (no
        elapsed_s); `bad_files`: files skipped so far (None: not watched); `telemetry`: its epoch_stats()."""
        return dataclasses.replace(
            cls.from_json({"epoch": epoch, **train, **(val or {}), "lr": lr}),
            elapsed_s=None if launched_at is None else round(time.time() - launched_at, 3),  # the time to accuracy
            bad_files=bad_files, telemetry=EpochTelemetry.from_json(telemetry) if telemetry is not None else None)
