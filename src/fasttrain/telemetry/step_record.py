"""What the training loop hands telemetry for each loader batch (recorder.py keeps them; the run log and the
display read them back through StepEvent). Plain data: no torch, no clock of its own."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class StepRecord:
    """One loader batch as the loop measured it (host wall-clock seconds; no device sync implied).

    epoch and batch_index are 0-based; step counts optimizer steps taken so far.
    loss/grad_norm/amp_scale may be None on batches where the loop did not read them back
    (reading a CUDA tensor with .item() forces a sync, so the loop does it only every few steps).
    """

    epoch: int
    step: int
    batch_index: int
    batches_in_epoch: int
    images: int
    data_wait_s: float
    h2d_s: float
    compute_s: float
    loss: float | None = None
    lr: float | None = None
    grad_norm: float | None = None
    amp_scale: float | None = None
    skipped: bool = False
    batch_size: int = 0
    accumulation_steps: int = 1
    # time.perf_counter() when the batch finished. A loop that records batches in bursts (after a
    # sync every few steps) must set it, or rates would come from the burst's own timing.
    end_time: float | None = None
