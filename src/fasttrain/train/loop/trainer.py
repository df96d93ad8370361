"""The training loop the Plan drives: epochs of steps, validation, checkpoints, early stopping. `_train_pass` is the
batch loop, on one screen: each batch is one call of the step engine (step.py) -> StepOutcome; data-wait is timed
here, copy and compute by the engine (CUDA events read back once per logged step, step_report.py). A stop request
(SIGTERM/SIGINT) is honoured after the micro-step in flight (an open accumulation window is taken back and trained
again after the resume; under DDP at the next optimizer step): a mid-epoch checkpoint, then `Interrupted`; the same
checkpoint every `save_every_s` s (signals/stop_control.py). `restore()` continues at the batch after it. Under DDP
the ranks agree on stops, saves and a time budget's plan (budget.py) and sum their metrics; only rank 0 writes."""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fasttrain.train.loop.checkpointing import Checkpointer, restore_rank_rng
from fasttrain.train.loop.data_check import check_trained, skipped_so_far, validation_note
from fasttrain.train.loop.divergence import check as check_divergence
from fasttrain.train.loop.epoch_row import EpochRow
from fasttrain.train.loop.epoch_sums import EpochSums, take_back
from fasttrain.train.loop.events import Collaborators
from fasttrain.train.loop.heap import long_lived_objects_frozen
from fasttrain.train.loop.norm_stats import RecentBatches
from fasttrain.train.loop.options import LoopOptions
from fasttrain.train.loop.outcome import Faults, FitResult, Interrupted
from fasttrain.train.loop.step import StepEngine, StepOutcome
from fasttrain.train.loop.step_report import PendingStep, StepReporter, pending_step
from fasttrain.train.loop.trainer_state import TrainerState
from fasttrain.train.loop.validation import evaluate
from fasttrain.train.signals.stop_control import StopControl
from fasttrain.train.state.run_state import EpochPartial, FitProgress, Position, RunState

if TYPE_CHECKING:
    from fasttrain.train.parallel.ddp import DistContext
    from fasttrain.train.signals.lifecycle import GracefulStop

__all__ = ["FitResult", "Interrupted", "LoopOptions", "Trainer"]


class Trainer(TrainerState):
    """Epochs of steps over a StepEngine (this file); snapshot() and restore(), the checkpoint side, are
    trainer_state.py's."""

    def __init__(self, engine: StepEngine, *, collaborators: Collaborators | None = None,
                 options: LoopOptions = LoopOptions(), stop: GracefulStop | None = None,
                 dist: DistContext | None = None):
        self.engine = engine
        self.collaborators = collaborators or Collaborators()  # what the loop reports to and writes through
        self.listeners = self.collaborators.listeners()
        self.reporter = StepReporter(self.collaborators.telemetry, self.listeners, self.collaborators.bad)
        self.options = options
        self.control = StopControl(stop, options.save_every_s, dist, options.budget)
        self.dist = dist
        self.world = dist.size if dist is not None else 1
        self.notes: list[str] = list(engine.notes)
        self._warned: set[str] = set()
        self.batch_in_epoch = 0                # absolute index of the next batch of this epoch
        self.pass_start = 0                    # batch this pass over the epoch began at (>0 after a resume)
        self.nonfinite_total = 0
        self.checkpoints = Checkpointer(self.collaborators.checkpoints, self._warn)
        self.progress = FitProgress()
        self._start = Position(0, 0, 0)        # where fit() begins: a resumed checkpoint's position
        self._resumed: RunState | None = None
        self._partial: EpochPartial | None = None
        self._result: FitResult | None = None
        self.recent = RecentBatches(options.precise_bn_images)  # what validation re-estimates batch norms on
        engine.on_warning(self._warn)

    @property
    def model(self) -> torch.nn.Module:
        return self.engine.module

    @property
    def last_good(self) -> Path | None:
        """The newest checkpoint known to be complete (None before the first)."""
        return self.checkpoints.last_good

    @property
    def result(self) -> FitResult | None:
        """What fit() has recorded so far (also after it was interrupted); None before fit() began."""
        return self._result

    def _warn(self, text: str) -> None:
        if text in self._warned:
            return
        self._warned.add(text)
        self.notes.append(text)
        self.listeners.on_message(f"warning: {text}")
        self.collaborators.warn(text)

    # -- one epoch -----------------------------------------------------------------------------------
    def train_epoch(self, loader: Iterable[Any], epoch: int, batches: int | None = None, *, first: int = 0,
                    partial: EpochPartial | None = None) -> dict[str, Any]:
        """Train over `loader` once (or its first `batches` batches). -> mean loss, images, seconds.
        `first`: index of the loader's first batch within the epoch (a resumed pass), `partial`: the
        epoch's sums up to there, from the checkpoint."""
        self.engine.train_mode(True)
        n = first + (batches if batches is not None else len(loader))  # type: ignore[arg-type]  # sized, or `batches`
        sums = EpochSums.resumed(partial, carry=self.dist is None or self.dist.is_main, device=self.engine.device)
        self.pass_start = self.batch_in_epoch = first
        bad = self.collaborators.bad  # the data's unreadable files so far
        it, skips = iter(loader), skipped_so_far(bad)
        try:
            self._train_pass(it, epoch, first, n, sums)
            seen = self.batch_in_epoch * self.world   # loader batches over all ranks
            totals = sums.totals(self.dist, seen, epoch=epoch, lr=self.engine.schedule.current())
            self.nonfinite_total += int(totals["train_nonfinite_batches"]) - (partial.nonfinite if partial else 0)
            skipped = skipped_so_far(bad) - skips  # samples lost to unreadable files: said, never a success
            skipped = int(self.dist.sums(skipped)[0]) if self.dist is not None else skipped
            check_trained(epoch, int(totals["train_images"]), skipped, n - first, bad, self.last_good)
            return totals
        finally:
            self.control.drain()
            if (close := getattr(it, "close", None)) is not None:  # a generator over a DataLoader: its workers
                close()                                            # stop now, not when a traceback is freed

    def _train_pass(self, it: Iterator[Any], epoch: int, first: int, n: int, sums: EpochSums) -> None:
        """The batch loop: wait for a batch, step, add it up, check, report, stop or save between steps."""
        pending: list[PendingStep] = []
        window: list[StepOutcome] = []  # the micro-steps of the accumulation window still open
        last_log = time.perf_counter()
        for i in range(first, n):
            if window and self.control.stop_mid_window():  # within one micro-step: the open window is taken back
                self.batch_in_epoch = i - take_back(window, sums)
                self.engine.drop_open_window()
                self._stop_or_save(epoch, self.batch_in_epoch - 1, pending, sums)
            if self.options.before_step is not None:
                self.options.before_step(i)
            waited_from = time.perf_counter()
            batch = next(it, None)
            if batch is None:
                break
            got = time.perf_counter()
            log_now = i == first or i == n - 1 or (got - last_log) >= self.options.log_interval_s
            out = self.engine.step(batch, i, n, epoch=epoch, measure=log_now)
            self.recent.add(batch)
            sums.add(out)
            pending.append(pending_step(out, epoch, i, n, got - waited_from, world=self.world, read=log_now))
            self.batch_in_epoch = i + 1
            if log_now or not self.engine.cuda:  # a CPU reads device values for free; CUDA waits for a logged step
                self.engine.guard.check(self.options.on_nan == "stop", self.engine.schedule.step, epoch, i,
                                        out.lr, self.last_good)
            if log_now:
                self.reporter.flush(pending)
                pending, last_log = [], time.perf_counter()
            window = [] if out.closed else [*window, out]
            if out.closed and i + 1 < n and self._stop_or_save(epoch, i, pending, sums):
                break  # the time budget's last step (agreed by the ranks): the epoch ends here, validated and saved
        self.reporter.flush(pending)
        self._partial = None

    def _stop_or_save(self, epoch: int, i: int, pending: list[PendingStep], sums: EpochSums) -> bool:
        """After an optimizer step inside the epoch: write the mid-epoch checkpoint when a stop was requested
        (then raise Interrupted) or a periodic save is due. -> the time budget is spent (this was the last step)."""
        stopping, due, spent = self.control.after_step(self.engine.schedule.step)
        if stopping or due:
            self.reporter.flush(pending)
            pending.clear()
            self._partial = sums.partial(self.dist)
            path = self._checkpoint(epoch, consumed_batches=self.batch_in_epoch - self.pass_start)
            if stopping:
                raise self.control.interrupted(path, epoch, i + 1, self.engine.schedule.step)
        return spent

    def validate(self, loader: Iterable[Any], max_batches: int | None = None, epoch: int = 0) -> dict[str, Any]:
        """Loss, acc@1, acc@5 over the validation set, one sync at the end; epoch (1-based): its class counts kept."""
        sink = self._result.classes.at(epoch) if epoch and self._result is not None else None
        return evaluate(self.engine, loader, dist=self.dist, max_batches=max_batches, test_flip=self.options.test_flip,
                        norms=self.recent, classes_to=sink)

    # -- the whole run -------------------------------------------------------------------------------
    def fit(self, train_loader: Iterable[Any], val_loader: Iterable[Any] | None, epochs: int, *,
            set_epoch: Callable[[int], None] | None = None) -> FitResult:
        started, start, pace = time.perf_counter(), self._start, self.options.budget
        # Fail in seconds, not after a whole epoch, when validation is broken: 2 batches first (a budget times them).
        sanity = None if val_loader is None else self.validate(pace.timed(val_loader) if pace else val_loader, 2)
        if pace is not None:  # the reserve for the end: a whole validation (budget_reserve.py) and the last write
            pace.start_after(sanity, val_loader, self.checkpoints.expected_s(self.model, self.engine.optimizer))
        self._result = FitResult(self.progress, sanity=sanity, notes=self.notes)
        if self._resumed is not None:  # after the sanity check: the next batch sees what it saw before
            restore_rank_rng(self._resumed, self.dist)
        if self.collaborators.telemetry is not None:
            self.collaborators.telemetry.start()
        try:
            with long_lived_objects_frozen():  # no 0.2 s walk of the imports' objects mid-run (heap.py)
                stopped_early = self._epochs(train_loader, val_loader, epochs, start, set_epoch)
        finally:
            if self.collaborators.telemetry is not None:
                self.collaborators.telemetry.stop()
        self._result = replace(self._result, stopped_early=stopped_early, wall_s=time.perf_counter() - started)
        return self._result

    def _epochs(self, train_loader: Iterable[Any], val_loader: Iterable[Any] | None, epochs: int, start: Position,
                set_epoch: Callable[[int], None] | None) -> bool:
        """Train and validate from `start` to `epochs`; checkpoints, early stop, budget, stop requests.
        -> whether patience ran out."""
        stopped_early = False
        for epoch in range(start.finished_epochs, epochs):
            if set_epoch is not None:
                set_epoch(epoch)
            first = start.batch if epoch == start.epoch and start.batch > 0 else 0
            partial = self._resumed.partial if first and self._resumed is not None else None
            trained = self.train_epoch(train_loader, epoch, first=first, partial=partial)
            io = self.collaborators
            row = EpochRow.build(epoch + 1, trained, self._validation_row(val_loader, epoch),
                                 self.engine.schedule.current(), launched_at=self.options.launched_at,
                                 bad_files=len(io.bad.paths) if io.bad is not None else None,
                                 telemetry=io.telemetry.epoch_stats() if io.telemetry is not None else None)
            self.engine.schedule.epoch_end(row.val_loss)
            pass_done = self.batch_in_epoch - self.pass_start  # the sampler then records the epoch as done
            self.batch_in_epoch = 0
            if self.progress.add_epoch(row) and self.collaborators.checkpoints is not None:
                self.checkpoints.new_best(self.engine.evaluated or self.model, epoch + 1, row.val_acc1)
            stopped_early = self.progress.out_of_patience(self.options.patience)
            spent = self.options.budget is not None and self.options.budget.epoch_end(  # agreed by the ranks
                row, self.checkpoints.expected_s(self.model, self.engine.optimizer))
            stop = self.control.at_epoch_end() and epoch + 1 < epochs and not spent
            # The row first, then the save: metrics.jsonl and the display do not wait for the write (0.6 s for
            # resnet18 + AdamW); a resume drops a row logged after its checkpoint (run/log_trim.py): logs stay in step.
            self.listeners.on_epoch_end(row)
            self._checkpoint(epoch + 1, row, pass_done, epoch=epoch,
                             final=stop or stopped_early or spent or epoch + 1 >= epochs)
            check_divergence(self.progress.history, self.last_good)  # a loss that runs away: exit 1
            if spent:
                break
            if stopped_early:
                self._warn(f"early stop after epoch {epoch + 1}: no better val acc@1 for "
                           f"{self.options.patience} epochs")
                break
            if stop:
                raise self.control.interrupted(self.last_good, epoch + 1, 0, self.engine.schedule.step)
        return stopped_early

    def _validation_row(self, loader: Iterable[Any] | None, epoch: int) -> dict[str, Any] | None:
        if loader is None:
            return None
        skips = skipped_so_far(self.collaborators.bad)
        row = self.validate(loader, epoch=epoch + 1)
        if note := validation_note(epoch, row, skipped_so_far(self.collaborators.bad) - skips, self.collaborators.bad):
            self._warn(note)
        return row

    def faults(self, batch: int) -> Faults:
        """What went wrong and was survived, for the summary; `batch`: the plan's per-device batch."""
        engine = self.engine
        return Faults(list(engine.backoff.events), engine.micro_batch(batch), engine.accumulation_steps,
                      self.nonfinite_total, list(self.checkpoints.errors), self.last_good)
