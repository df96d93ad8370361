"""What each epoch's row adds beside its training totals (epoch_sums.py) and validation (validation.py): the LR
after the epoch, the time since launch (time to accuracy), files skipped so far and telemetry's epoch figures."""
from __future__ import annotations

import time
from typing import Any

from fasttrain.train.loop.events import Collaborators


def epoch_figures(lr: float, io: Collaborators, launched_at: float | None) -> dict[str, Any]:
    """`launched_at`: time.time() when the process started, or None (then no elapsed_s)."""
    row: dict[str, Any] = {"lr": lr}
    if launched_at is not None:  # from launch to the end of this epoch's validation, in seconds
        row["elapsed_s"] = round(time.time() - launched_at, 3)
    if io.bad is not None:
        row["bad_files"] = len(io.bad.paths)
    if io.telemetry is not None:
        row.update({f"telemetry_{k}": v for k, v in io.telemetry.epoch_stats().items()})
    return row
