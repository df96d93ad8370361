"""The Trainer's checkpoint side: the run's state as one RunState and back, and when it is written.

snapshot() is the step engine's own state_dict() (weights, optimizer, schedule, loss scaler, back-off, moving
average: step.py) and where the loop stands (the position, the open epoch's sums, the epochs so far, the RNG
states), with what the run adds (LoopOptions.extras: plan, arguments, data order); restore() loads the same back,
so the next batch after a resume is the one the stopped run would have trained. The file format is
state/run_state.py's.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fasttrain.train.loop.checkpointing import Checkpointer
from fasttrain.train.loop.epoch_row import EpochRow
from fasttrain.train.loop.events import Collaborators
from fasttrain.train.loop.options import LoopOptions
from fasttrain.train.loop.step import StepEngine
from fasttrain.train.signals.stop_control import StopControl
from fasttrain.train.state.checkpoint import fitting_this_run
from fasttrain.train.state.rng import rng_states
from fasttrain.train.state.run_state import EpochPartial, FitProgress, Position, Resume, RunExtras, RunState

if TYPE_CHECKING:
    from fasttrain.train.parallel.ddp import DistContext


class TrainerState:
    """The state half of Trainer (trainer.py): the fields below are the Trainer's (set in its __init__)."""

    engine: StepEngine
    collaborators: Collaborators
    options: LoopOptions
    control: StopControl
    dist: DistContext | None
    checkpoints: Checkpointer
    progress: FitProgress
    batch_in_epoch: int                # absolute index of the next batch of this epoch
    nonfinite_total: int
    _start: Position                   # where fit() begins: a resumed checkpoint's position
    _resumed: RunState | None
    _partial: EpochPartial | None      # the open epoch's sums at a mid-epoch checkpoint

    def snapshot(self, next_epoch: int, row: EpochRow | None = None, consumed_batches: int = 0) -> RunState:
        """Everything an exact resume needs; `next_epoch` and the batch in it say where to continue.
        `consumed_batches`: loader batches trained in the current pass (mid-epoch checkpoints). Every rank
        calls it (the RNG states are gathered)."""
        extras = self.options.extras(consumed_batches) if self.options.extras is not None else RunExtras()
        progress = self.progress
        return RunState(
            **self.engine.state_dict(), position=Position(self.engine.schedule.step, next_epoch, self.batch_in_epoch),
            partial=self._partial if self.batch_in_epoch else None, rng=rng_states(),
            rng_per_rank=self.dist.gather(rng_states()) if self.dist is not None else None,
            metrics=row.to_json() if row is not None else {},
            nonfinite_total=self.nonfinite_total, extras=extras,
            fit=FitProgress(list(progress.history), progress.best_acc1, progress.best_epoch, progress.stale))

    def restore(self, resume: Resume) -> None:
        """Continue from a checkpoint written by snapshot(): fit() then starts where it was written. Weights or
        an optimizer state that do not fit this run are a UserError naming the file."""
        state = resume.state
        with fitting_this_run(resume.path, self.engine.module, state.model):
            self.engine.load_state_dict(state.engine_state())
        self.checkpoints.last_good = Path(resume.path)
        self.nonfinite_total, self.progress = state.nonfinite_total, state.fit
        self._start, self._resumed = state.position, state

    def _checkpoint(self, next_epoch: int, row: EpochRow | None = None, consumed_batches: int = 0, *,
                    epoch: int | None = None, final: bool = True) -> Path | None:
        """Snapshot the run and write last.pt (checkpointing.py): mid-epoch and `final` ones always, other epoch
        ends (`epoch`) when the write is worth its cost. Under DDP every rank takes part in the snapshot (the RNG
        states are gathered) and every epoch end is written, so the ranks need not agree on the clock."""
        policy = self.collaborators.checkpoints
        if policy is None and self.dist is None:
            return None
        state = self.snapshot(next_epoch, row, consumed_batches)
        numbered = epoch is not None and policy is not None and policy.numbered_due(epoch)
        if not (final or numbered or self.dist is not None or self.checkpoints.due(state)):
            return None
        self.control.saved()
        return self.checkpoints.write(state, epoch=epoch, final=final)
