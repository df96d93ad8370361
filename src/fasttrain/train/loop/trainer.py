"""The training loop the Plan drives: epochs of timed steps, validation, checkpoints, early stopping.

Each loader batch is timed in three parts: data-wait (blocked in the loader), host-to-device copy and
compute. On a CPU the wall clock measures them directly. On CUDA the copy and the compute are
asynchronous, so they are bracketed with CUDA events and read back once per *logged* step (one sync
per log interval, never one per step; step_report.py); loss, gradient norm and AMP scale are read at the
same moment. Telemetry, the display and the run log are optional collaborators (None in run_synthetic_steps
and tests); the display and the run log are told through the TrainListener protocol (events.py).

Resilience: a stop request (SIGTERM/SIGINT) is honoured when the optimizer step in flight has closed: a
mid-epoch checkpoint is written and `Interrupted` raised; the same checkpoint is written every `save_every_s`
seconds (stopping.py). Non-finite steps are skipped (precision.py) and `on_nan="stop"` stops after
MAX_NONFINITE_STREAK in a row. An out-of-memory step is retried as smaller micro-batches (backoff.py).
`load_state()` continues a run at the batch after the one its checkpoint was written at.

Data-parallel (`dist`: a distributed.DistContext): the model runs inside DDP; micro-steps that do not close an
accumulation window skip the gradient all-reduce (no_sync); a stop request or a due periodic save is agreed
by every rank (stopping.py); epoch and validation metrics are summed over ranks; checkpoints hold every rank's
RNG state and only rank 0 writes them (its collaborators are the only ones set). The out-of-memory back-off is
off (one rank cannot change the batch alone).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from fasttrain.core.errors import JobFailed, Problem, UserError
from fasttrain.models.setup import prepare_model
from fasttrain.plan import Plan
from fasttrain.profiles.schema import OptimSpec, Profile
from fasttrain.train.loop.backoff import OomBackoff
from fasttrain.train.state.checkpoint import load_model_state, restore_rng_states, rng_states
from fasttrain.train.loop.data_check import check_trained, skipped_so_far, validation_note
from fasttrain.train.loop.epoch_sums import EpochSums
from fasttrain.train.events import Collaborators
from fasttrain.train.loop.optim import LRSchedule, build_optimizer
from fasttrain.train.loop.outcome import FitResult, Interrupted
from fasttrain.train.loop.precision import make_precision
from fasttrain.train.signals.resilience import GracefulStop, NonFiniteGuard
from fasttrain.train.loop.step import StepEngine, unpack_batch, window_length
from fasttrain.train.loop.step_report import PendingStep, StepReporter
from fasttrain.train.signals.stop_control import StopControl
from fasttrain.train.loop.validation import evaluate

__all__ = ["Collaborators", "FitResult", "Interrupted", "Trainer"]


class Trainer:
    def __init__(self, plan: Plan, optim: OptimSpec, model: torch.nn.Module, *, steps_per_epoch: int,
                 activation_checkpointing: bool = False, mixup: Callable[..., Any] | None = None,
                 collaborators: Collaborators | None = None, profile: Profile | None = None,
                 log_interval_s: float = 1.0, extra_state: Callable[[int], dict[str, Any]] | None = None,
                 on_nan: str = "stop", stop: GracefulStop | None = None, save_every_s: float | None = None,
                 dist: Any = None):
        self.plan = plan
        self.optim = optim
        self.profile = profile
        self.io = collaborators or Collaborators()
        self.listeners = self.io.listeners()
        self.reporter = StepReporter(self.io.telemetry, self.listeners, self.io.bad_files)
        self.device = torch.device(plan.device)
        self.log_interval_s = log_interval_s
        self.step_hook: Callable[[int], None] | None = None
        self.extra_state = extra_state       # (loader batches done in this pass) -> more checkpoint content
        self.on_nan = on_nan
        self.stop = stop
        self.control = StopControl(stop, save_every_s, dist)
        self._warned: set[str] = set()
        self.notes: list[str] = []
        self.dist = dist
        self.world = dist.size if dist is not None else 1
        module, runner, notes = prepare_model(model, plan, activation_checkpointing=activation_checkpointing,
                                              warn=self._warn, wrap=dist.wrap if dist is not None else None)
        self.notes.extend(notes)
        optimizer = build_optimizer(module, optim, plan.scaled_lr, fused=plan.fused_optimizer)
        self.accumulation = max(1, plan.accumulation_steps)
        self.schedule = LRSchedule.from_spec(optimizer, optim, peak_lr=plan.scaled_lr,
                                             steps_per_epoch=math.ceil(max(1, steps_per_epoch) / self.accumulation))
        self.precision = make_precision(plan.precision, self.device)
        self.engine = StepEngine(module, runner, optimizer, self.precision, self.schedule, device=self.device,
                                 channels_last=plan.channels_last, non_blocking=plan.pin_memory,
                                 clip_grad_norm=optim.clip_grad_norm, label_smoothing=optim.label_smoothing,
                                 mixup=mixup)
        # Off under DDP; run_synthetic_steps turns it off too (the batch search must see the OOM itself).
        self.backoff = OomBackoff(self.engine, self.schedule, accumulation=self.accumulation,
                                  effective_batch=plan.batch_size * self.accumulation * max(1, plan.world_size),
                                  warn=self._warn, enabled=dist is None)
        self.cuda = self.device.type == "cuda"
        self.batch_in_epoch = 0          # absolute index of the next batch of this epoch
        self.pass_start = 0              # batch this pass over the epoch began at (>0 after a resume)
        self.nonfinite = NonFiniteGuard(self.device)
        self.nonfinite_total = 0
        self.checkpoint_errors: list[str] = []
        self.last_good: Path | None = None   # newest checkpoint known to be complete
        self._resume: dict[str, Any] | None = None
        self._result: FitResult | None = None
        self._stale = 0
        self._partial: dict[str, Any] | None = None
        if dist is not None:
            self.notes.extend(dist.notes)

    @property
    def model(self) -> torch.nn.Module:
        return self.engine.module

    @property
    def result(self) -> FitResult | None:
        """What fit() has recorded so far (also after it was interrupted); None before fit() began."""
        return self._result

    @property
    def oom_backoff(self) -> bool:
        """Whether an out-of-memory step is retried as smaller micro-batches (backoff.py)."""
        return self.backoff.enabled

    @oom_backoff.setter
    def oom_backoff(self, enabled: bool) -> None:
        self.backoff.enabled = enabled

    @property
    def oom_events(self) -> list[dict[str, Any]]:
        return self.backoff.events

    def _warn(self, text: str) -> None:
        if text in self._warned:
            return
        self._warned.add(text)
        self.notes.append(text)
        self.listeners.on_message(f"warning: {text}")
        self.io.warn(text)

    # -- one epoch -----------------------------------------------------------------------------------
    def train_epoch(self, loader: Iterable[Any], epoch: int, batches: int | None = None, *, first: int = 0,
                    partial: dict[str, Any] | None = None) -> dict[str, Any]:
        """Train over `loader` once (or its first `batches` batches). -> mean loss, images, seconds.
        `first`: index of the loader's first batch within the epoch (a resumed pass), `partial`: the
        epoch's sums up to there, from the checkpoint."""
        self.engine.train_mode(True)
        n = first + (batches if batches is not None else len(loader))  # type: ignore[arg-type]
        partial = partial or {}
        sums = EpochSums.resumed(partial, carry=self.dist is None or self.dist.is_main, device=self.device)
        self.pass_start = self.batch_in_epoch = first
        it, skips = iter(loader), skipped_so_far(loader)
        try:
            self._train_pass(it, epoch, first, n, sums)
            totals = self._epoch_totals(epoch, partial, sums)
            skipped = skipped_so_far(loader) - skips  # samples lost to unreadable files: said, never a success
            skipped = int(self.dist.sums(skipped)[0]) if self.dist is not None else skipped
            check_trained(epoch, totals["train_images"], skipped, n - first, loader, self.last_good)
            return totals
        finally:
            self.control.drain()
            close = getattr(it, "close", None)  # a generator over a DataLoader: shuts its workers down now,
            if close is not None:               # not whenever a traceback holding it is collected
                close()

    def _train_pass(self, it: Any, epoch: int, first: int, n: int, sums: EpochSums) -> None:
        pending: list[PendingStep] = []
        last_log = time.perf_counter()
        for i in range(first, n):
            if self.step_hook is not None:  # e.g. train/trial/thread_ab.py: compute threads decided by the first steps
                self.step_hook(i)
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            log_now = i == first or i == n - 1 or (t1 - last_log) >= self.log_interval_s
            closes, step = self._train_batch(batch, epoch, i, n, log_now, t0, t1, sums)
            pending.append(step)
            self.batch_in_epoch = i + 1
            if log_now or not self.cuda:  # a CPU reads device values for free; CUDA waits for a logged step
                self.nonfinite.check(self.on_nan == "stop", self.schedule.step, epoch, i, step.fields["lr"],
                                     self.last_good)
            if log_now:
                self.reporter.flush(pending)
                pending = []
                last_log = time.perf_counter()
            if closes and i + 1 < n:
                self._stop_or_save(epoch, i, pending, sums)
        self.reporter.flush(pending)
        self._partial = None

    def _train_batch(self, batch: Any, epoch: int, i: int, n: int, log_now: bool, t0: float, t1: float,
                     sums: EpochSums) -> tuple[bool, PendingStep]:
        """Copy, forward, backward and (when it closes its accumulation window) step one loader batch.
        t0, t1: perf_counter() before and after the loader handed it over. -> (window closed, its record)."""
        engine = self.engine
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if self.cuda else None
        if ev:
            ev[0].record()
        images, targets = engine.to_device(*unpack_batch(batch))
        if ev:
            ev[1].record()
        t2 = time.perf_counter()
        window, closes = window_length(i, n, self.accumulation)
        lr = self.schedule.current()  # the LR this batch's optimizer step uses
        loss = self.backoff.forward_backward(images, targets, window, i % self.accumulation == 0, epoch, i, closes)
        ok = torch.isfinite(loss)  # kept on the device: no sync per step
        sums.loss += torch.where(ok, loss, 0.0)
        sums.nonfinite += ~ok
        # Reading the scale syncs a GPU, so a skipped fp16 step (inf/NaN gradients) is detected on logged steps.
        scale_before = self.precision.scale if log_now and closes and self.precision.scaler is not None else None
        norm = engine.optimizer_step(want_norm=log_now) if closes else None
        bad = ~ok
        guard_found_inf = self.precision.guard_found_inf
        if closes and guard_found_inf is not None:
            bad = bad | (guard_found_inf > 0)  # fp32/bf16: gradients non-finite, step skipped by the guard
        self.nonfinite.record(bad)
        if ev:
            ev[2].record()
        t3 = time.perf_counter()
        bs = int(targets.shape[0])
        sums.images += bs
        # images: the whole job's (the ranks step in lockstep), so images/s is the job's throughput.
        fields = dict(epoch=epoch, step=self.schedule.step, batch_index=i, batches_in_epoch=n,
                      images=bs * self.world,
                      data_wait_s=t1 - t0, h2d_s=t2 - t1, compute_s=t3 - t2, loss=None,
                      lr=lr, grad_norm=None, amp_scale=None, skipped=False,
                      batch_size=engine.micro_batch(bs), accumulation_steps=self.accumulation * engine.splits,
                      end_time=t3)
        if log_now:
            fields["loss"] = float(loss)          # the one sync of this log interval
            fields["grad_norm"] = float(norm) if norm is not None else None
            fields["amp_scale"] = self.precision.scale
            fields["skipped"] = scale_before is not None and fields["amp_scale"] < scale_before
        return closes, PendingStep(fields, tuple(ev) if ev else None)

    def _stop_or_save(self, epoch: int, i: int, pending: list[PendingStep], sums: EpochSums) -> None:
        """After an optimizer step inside the epoch: write the mid-epoch checkpoint when a stop was requested
        (then raise Interrupted) or a periodic save is due."""
        stopping, due = self.control.after_step(self.schedule.step)
        if not (stopping or due):
            return
        self.reporter.flush(pending)
        pending.clear()
        self._partial = sums.partial(self.dist)
        path = self._save_mid_epoch(epoch)
        if stopping:
            raise Interrupted(self.stop, path, epoch, i + 1, self.schedule.step)  # type: ignore[arg-type]

    def _epoch_totals(self, epoch: int, partial: dict[str, Any], sums: EpochSums) -> dict[str, Any]:
        """The pass's row: mean training loss over the finite batches, non-finite count, images, seconds."""
        loss_total, bad_total, images_seen = sums.reduced(self.dist)
        seen_batches = self.batch_in_epoch * self.world   # loader batches over all ranks
        self.nonfinite_total += bad_total - int(partial.get("nonfinite", 0))
        # fp16 overflows now and then (the GradScaler skips those steps); a whole epoch of them is divergence.
        if seen_batches and bad_total == seen_batches:
            raise JobFailed(f"training diverged in epoch {epoch + 1}: every training loss was NaN or infinite "
                            f"(LR {self.schedule.current():.4g}); lower optim.base_lr or set optim.clip_grad_norm")
        mean_loss = loss_total / max(1, seen_batches - bad_total)
        return {"train_loss": mean_loss, "train_nonfinite_batches": bad_total, "train_images": images_seen,
                "train_s": time.perf_counter() - sums.started}

    # -- faults --------------------------------------------------------------------------------------
    def _save_mid_epoch(self, epoch: int) -> Path | None:
        self.control.saved()
        if self.io.checkpoints is None and self.dist is None:
            return None
        payload = self.state(epoch, consumed_batches=self.batch_in_epoch - self.pass_start)  # every rank: RNG gather
        if self.io.checkpoints is None:
            return None
        path = self.io.checkpoints.save_last(payload)
        self._note_saved(path)
        return path

    def _note_saved(self, path: Path | None) -> None:
        if path is not None:
            self.last_good = path
        errors = self.io.checkpoints.errors if self.io.checkpoints is not None else []
        for text in errors[len(self.checkpoint_errors):]:
            self.checkpoint_errors.append(text)
            self._warn(text)

    # -- validation ----------------------------------------------------------------------------------
    def validate(self, loader: Iterable[Any], max_batches: int | None = None) -> dict[str, Any]:
        """Loss, acc@1 and (with 5 or more classes) acc@5 over the validation set; one sync at the end."""
        return evaluate(self.engine, loader, dist=self.dist, max_batches=max_batches)

    # -- the whole run -------------------------------------------------------------------------------
    def fit(self, train_loader: Iterable[Any], val_loader: Iterable[Any] | None, epochs: int, *,
            set_epoch: Callable[[int], None] | None = None, start_epoch: int = 0) -> FitResult:
        io = self.io
        started = time.perf_counter()
        result = FitResult(epochs_run=0, best_acc1=None, best_epoch=None, stopped_early=False, notes=self.notes)
        resume = self._resume or {}
        fit_state = resume.get("fit") or {}
        result.best_acc1, result.best_epoch = fit_state.get("best_acc1"), fit_state.get("best_epoch")
        result.history = list(fit_state.get("history", []))
        result.epochs_run = len(result.history)  # a resumed run counts its earlier epochs once, as its history does
        first_epoch = int(resume.get("epoch", start_epoch))
        first_batch = int(resume.get("batch_in_epoch", 0))
        if val_loader is not None:  # fail in seconds, not after a whole epoch, when validation is broken
            result.sanity = self.validate(val_loader, max_batches=2)
        if resume.get("rng") is not None:  # after the sanity check: the next batch sees what it saw before
            per_rank = resume.get("rng_per_rank") or []
            own = per_rank[self.dist.rank] if self.dist is not None and len(per_rank) == self.world else None
            restore_rng_states(own or resume["rng"])
        if io.telemetry is not None:
            io.telemetry.start()
        patience = self.optim.early_stopping_patience
        stale = int(fit_state.get("stale", 0))
        self._result = result
        self._stale = stale
        try:
            for epoch in range(first_epoch, epochs):
                self.batch_in_epoch = 0
                if set_epoch is not None:
                    set_epoch(epoch)
                first = first_batch if epoch == first_epoch else 0
                row: dict[str, Any] = {"epoch": epoch + 1, **self.train_epoch(
                    train_loader, epoch, first=first, partial=resume.get("partial") if first else None)}
                if val_loader is not None:
                    skips = skipped_so_far(val_loader)
                    row.update(self.validate(val_loader))
                    note = validation_note(epoch, row, skipped_so_far(val_loader) - skips, val_loader)
                    if note:
                        self._warn(note)
                row["lr"] = self.schedule.current()
                if io.bad_files is not None:
                    row["bad_files"] = len(io.bad_files())
                if io.telemetry is not None:
                    row.update({f"telemetry_{k}": v for k, v in io.telemetry.epoch_stats().items()})
                self.schedule.epoch_end(row.get("val_loss"))
                acc = row.get("val_acc1")
                is_best = acc is not None and (result.best_acc1 is None or acc > result.best_acc1)
                if is_best:
                    result.best_acc1, result.best_epoch, stale = acc, epoch + 1, 0
                else:
                    stale += 1
                self._stale = stale
                pass_done = self.batch_in_epoch - self.pass_start  # the sampler then records the epoch as done
                self.batch_in_epoch = 0
                result.history.append(row)
                result.epochs_run += 1
                if io.checkpoints is not None or self.dist is not None:
                    self.control.saved()
                    payload = self.state(epoch + 1, row, pass_done)  # every rank: the RNG states are gathered
                    if io.checkpoints is not None:
                        written = io.checkpoints.save_epoch(payload, epoch, is_best)
                        self._note_saved(written[0] if written else None)
                self.listeners.on_epoch_end(row)
                if patience is not None and acc is not None and stale >= patience:
                    result.stopped_early = True
                    self._warn(f"early stop after epoch {epoch + 1}: no better val acc@1 for {patience} epochs")
                    break
                if self.control.at_epoch_end() and epoch + 1 < epochs:
                    raise Interrupted(self.stop, self.last_good, epoch + 1, 0, self.schedule.step)  # type: ignore[arg-type]
        finally:
            if io.telemetry is not None:
                io.telemetry.stop()
        result.wall_s = time.perf_counter() - started
        return result

    def state(self, next_epoch: int, row: dict[str, Any] | None = None, consumed_batches: int = 0) -> dict[str, Any]:
        """Everything an exact resume needs; `next_epoch`/`batch_in_epoch` say where to continue.
        `consumed_batches`: loader batches trained in the current pass (mid-epoch checkpoints)."""
        result = self._result
        payload: dict[str, Any] = {
            "model": self.model.state_dict(), "optimizer": self.engine.optimizer.state_dict(),
            "scaler": self.precision.state_dict(),
            "schedule": self.schedule.state_dict(), "epoch": next_epoch, "batch_in_epoch": self.batch_in_epoch,
            "partial": self._partial if self.batch_in_epoch else None,
            "rng": rng_states(), "plan": self.plan.to_dict(), "metrics": row or {},
            "rng_per_rank": self.dist.gather(rng_states()) if self.dist is not None else None,
            "profile": self.profile.model_dump(mode="json") if self.profile is not None else None,
            "micro_batch_splits": self.engine.splits, "oom_events": list(self.backoff.events),
            "nonfinite_total": self.nonfinite_total,
            "fit": {"best_acc1": result.best_acc1, "best_epoch": result.best_epoch, "stale": self._stale,
                    "history": list(result.history)} if result is not None else None,
        }
        if self.extra_state is not None:
            payload.update(self.extra_state(consumed_batches))
        return payload

    def load_state(self, payload: dict[str, Any], path: Path) -> None:
        """Restore a checkpoint written by state(); fit() then continues where it was written.
        Weights that do not fit the model, or optimizer state that does not fit, are a UserError naming `path`."""
        load_model_state(self.model, payload, path)
        try:
            self.engine.optimizer.load_state_dict(payload["optimizer"])
        except (KeyError, ValueError, TypeError) as exc:
            raise UserError([Problem(str(path), f"its optimizer state does not fit this run ({exc})",
                                     "resume with the same optim.optimizer as the run that wrote it")]) from exc
        self.precision.load_state_dict(payload.get("scaler"))
        self.schedule.load_state_dict(payload["schedule"])
        self.engine.splits = int(payload.get("micro_batch_splits") or 1)
        self.backoff.events = list(payload.get("oom_events") or [])
        self.nonfinite_total = int(payload.get("nonfinite_total") or 0)
        self._resume = payload
        self.last_good = Path(path)
