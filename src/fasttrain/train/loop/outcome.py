"""What fit() ends with: its result, or Interrupted when a stop request was honoured."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttrain.train.signals.resilience import GracefulStop


@dataclass
class FitResult:
    epochs_run: int
    best_acc1: float | None
    best_epoch: int | None
    stopped_early: bool
    history: list[dict[str, Any]] = field(default_factory=list)   # one row per epoch, oldest first
    sanity: dict[str, Any] | None = None                          # the 2-batch validation before epoch 1
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0


class Interrupted(Exception):
    """A stop request was honoured: the step in flight finished and a checkpoint was written (or not: None)."""

    def __init__(self, stop: GracefulStop, checkpoint: Path | None, epoch: int, batch: int, step: int):
        super().__init__(f"{stop.name} after optimizer step {step} (epoch {epoch + 1}, batch {batch})")
        self.signal_name, self.exit_code = stop.name, stop.exit_code
        self.checkpoint, self.epoch, self.batch, self.step = checkpoint, epoch, batch, step
