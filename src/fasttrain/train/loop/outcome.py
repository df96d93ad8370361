"""What a step and a fit end with: StepOutcome (one loader batch), FitResult, or Interrupted when a stop
request was honoured."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fasttrain.train.loop.class_tally import ClassTally
from fasttrain.train.loop.epoch_row import EpochRow
from fasttrain.train.state.run_state import FitProgress


@dataclass(frozen=True)
class StepTiming:
    """Where a step's time went, in seconds by the wall clock; on CUDA the copy and the compute run
    asynchronously, so `events` (copy started, copy done, compute done) hold the true times, read later."""

    copy_s: float
    compute_s: float
    end_time: float                       # time.perf_counter() when the step was done (on the host)
    events: tuple[Any, Any, Any] | None   # torch.cuda.Event x 3 on CUDA, None on a CPU


@dataclass(frozen=True)
class StepOutcome:
    """What one loader batch did. Device tensors: read them only on logged steps (each read is a sync)."""

    loss: torch.Tensor              # the batch's mean loss, detached
    loss_ok: torch.Tensor           # bool: the loss was finite (the epoch's mean counts only these)
    bad: torch.Tensor               # bool: the loss or the gradients were not finite, so the update was skipped
    grad_norm: torch.Tensor | None  # total gradient norm, when a window closed and it was asked for or clipped
    closed: bool                    # this batch closed its accumulation window: an optimizer step was taken
    images: int                     # samples in the batch (this process)
    lr: float                       # the LR of this batch's optimizer step
    step: int                       # optimizer steps taken so far (after this batch's)
    micro_batch: int                # samples per forward/backward (the batch, or its part after a back-off)
    accumulation_steps: int         # micro-batches per optimizer step now
    scale_before: torch.Tensor | None  # fp16: the loss scale before the step (measured closing steps), on the device
    scale_after: torch.Tensor | None   # fp16: the loss scale now (measured steps; reading it syncs a GPU)
    timing: StepTiming

    @property
    def skipped(self) -> bool:
        """fp16: the GradScaler skipped this step (its scale went down); known on measured steps only. Reading it
        syncs a GPU: logged steps only."""
        return self.scale_before is not None and self.scale_after is not None and \
            float(self.scale_after) < float(self.scale_before)


@dataclass
class FitResult:
    progress: FitProgress = field(default_factory=FitProgress)   # every epoch's row and the best so far
    stopped_early: bool = False
    sanity: dict[str, Any] | None = None                          # the 2-batch validation before epoch 1
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    classes: ClassTally = field(default_factory=ClassTally)       # the confusion matrices (per-class accuracy)

    @property
    def history(self) -> list[EpochRow]:
        return self.progress.history

    @property
    def epochs_run(self) -> int:
        """Epochs trained, a resumed run's earlier ones included (its history carries them)."""
        return len(self.progress.history)

    @property
    def best_acc1(self) -> float | None:
        return self.progress.best_acc1

    @property
    def best_epoch(self) -> int | None:
        return self.progress.best_epoch


@dataclass(frozen=True)
class Faults:
    """What a run survived: out-of-memory back-offs, skipped non-finite steps, checkpoints the disk refused."""

    oom_backoffs: list[dict[str, Any]]
    micro_batch: int                 # per-device micro-batch at the end (smaller after a back-off)
    accumulation_steps: int          # micro-batches per optimizer step at the end
    nonfinite_steps: int
    checkpoint_errors: list[str]
    last_good_checkpoint: Path | None


class Interrupted(Exception):
    """A stop request was honoured: the step in flight finished and a checkpoint was written (or not: None)."""

    def __init__(self, signal_name: str, exit_code: int, checkpoint: Path | None, epoch: int, batch: int, step: int):
        super().__init__(f"{signal_name} after optimizer step {step} (epoch {epoch + 1}, batch {batch})")
        self.signal_name, self.exit_code = signal_name, exit_code
        self.checkpoint, self.epoch, self.batch, self.step = checkpoint, epoch, batch, step
