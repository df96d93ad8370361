"""The training loop the Plan drives: epochs of timed steps, validation, checkpoints, early stopping.

Each loader batch is timed in three parts: data-wait (blocked in the loader), host-to-device copy and
compute. On a CPU the wall clock measures them directly. On CUDA the copy and the compute are
asynchronous, so they are bracketed with CUDA events and read back once per *logged* step (one sync
per log interval, never one per step); loss, gradient norm and AMP scale are read at the same moment.
Telemetry, the display and the run log are optional collaborators (None in run_synthetic_steps and tests);
the display and the run log are told through the TrainListener protocol (events.py), never imported.

Resilience (issue 6, helpers in resilience.py): a stop request (SIGTERM/SIGINT) is honoured when the
optimizer step in flight has closed: a mid-epoch checkpoint is written and `Interrupted` raised; the same
mid-epoch checkpoint is written every `save_every_s` seconds. Non-finite steps are skipped (see step.py) and
`on_nan="stop"` stops after MAX_NONFINITE_STREAK in a row. An out-of-memory step is retried on the same data
as micro-batches of half the size (twice the accumulation), keeping the effective batch and the LR.
`load_state()` continues a run at the batch after the one its checkpoint was written at.

Data-parallel (issue 8, `dist`: a distributed.DistContext): the model runs inside DDP; micro-steps that do not
close an accumulation window skip the gradient all-reduce (no_sync); a stop request or a due periodic save is
agreed through distributed.StopVote so every rank saves and stops after the same step; epoch and validation
metrics are summed over ranks; checkpoints hold every rank's RNG state and only rank 0 writes them (its
collaborators are the only ones set). The out-of-memory back-off is off (one rank cannot change the batch alone).
"""
from __future__ import annotations

import math
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from fasttrain.train.events import Listeners, RunLogListener, StepEvent, StepLog, TrainListener
from fasttrain.train.checkpoint import CheckpointPolicy, load_model_state, restore_rng_states, rng_states
from fasttrain.core.errors import JobFailed, Problem, UserError
from fasttrain.models.setup import prepare_model
from fasttrain.train.optim import LRSchedule, build_optimizer
from fasttrain.plan import Plan
from fasttrain.train.precision import make_precision
from fasttrain.profiles.schema import OptimSpec, Profile
from fasttrain.train.oom import free_device_memory, is_out_of_memory
from fasttrain.train.resilience import MAX_NONFINITE_STREAK, GracefulStop, NonFiniteGuard, SignalHook
from fasttrain.train.step import StepEngine, window_length


@dataclass
class Collaborators:
    """What the loop reports to; every field may be None."""

    telemetry: Any = None                   # telemetry.recorder.Telemetry: records steps, gives the snapshot
    dashboard: TrainListener | None = None  # the command's display (already entered)
    runlog: StepLog | None = None           # runlog.RunLog, told through RunLogListener
    checkpoints: CheckpointPolicy | None = None
    warn: Callable[[str], None] = lambda text: None
    bad_files: Callable[[], list[str]] | None = None   # skipped unreadable files so far (DataBundle.bad_files)

    def listeners(self) -> Listeners:
        return Listeners([self.dashboard, RunLogListener(self.runlog) if self.runlog is not None else None])


class Interrupted(Exception):
    """A stop request was honoured: the step in flight finished and a checkpoint was written (or not: None)."""

    def __init__(self, stop: GracefulStop, checkpoint: Path | None, epoch: int, batch: int, step: int):
        super().__init__(f"{stop.name} after optimizer step {step} (epoch {epoch + 1}, batch {batch})")
        self.signal_name, self.exit_code = stop.name, stop.exit_code
        self.checkpoint, self.epoch, self.batch, self.step = checkpoint, epoch, batch, step


@dataclass
class _Pending:
    """A step whose device timings are not read yet (CUDA events complete asynchronously)."""

    fields: dict[str, Any]
    events: tuple[Any, Any, Any] | None


@dataclass
class FitResult:
    epochs_run: int
    best_acc1: float | None
    best_epoch: int | None
    stopped_early: bool
    history: list[dict[str, Any]] = field(default_factory=list)
    sanity: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0


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
        self.device = torch.device(plan.device)
        self.log_interval_s = log_interval_s
        self.extra_state = extra_state       # (loader batches done in this pass) -> more checkpoint content
        self.on_nan = on_nan
        self.stop = stop
        self.save_every_s = save_every_s
        self._warned: set[str] = set()
        self.notes: list[str] = []
        self.dist = dist
        self.world = dist.size if dist is not None else 1
        module, runner, notes = prepare_model(model, plan, activation_checkpointing=activation_checkpointing,
                                              warn=self._warn, wrap=dist.wrap if dist is not None else None)
        self.notes.extend(notes)
        optimizer = build_optimizer(module, optim, plan.scaled_lr, fused=plan.fused_optimizer)
        accumulation = max(1, plan.accumulation_steps)
        self.schedule = LRSchedule.from_spec(optimizer, optim, peak_lr=plan.scaled_lr,
                                             steps_per_epoch=math.ceil(max(1, steps_per_epoch) / accumulation))
        self.precision = make_precision(plan.precision, self.device)
        self.engine = StepEngine(module, runner, optimizer, self.precision, self.schedule, device=self.device,
                                 channels_last=plan.channels_last, non_blocking=plan.pin_memory,
                                 clip_grad_norm=optim.clip_grad_norm, label_smoothing=optim.label_smoothing,
                                 mixup=mixup)
        self.accumulation = accumulation
        self.cuda = self.device.type == "cuda"
        self.epoch = 0
        self.batch_in_epoch = 0          # absolute index of the next batch of this epoch
        self.pass_start = 0              # batch this pass over the epoch began at (>0 after a resume)
        self.nonfinite = NonFiniteGuard(self.device)
        self.nonfinite_total = 0
        self.oom_events: list[dict[str, Any]] = []
        # run_synthetic_steps turns it off (the batch search must see the OOM itself), and so does DDP.
        self.oom_backoff = dist is None
        self.checkpoint_errors: list[str] = []
        self.last_good: Path | None = None   # newest checkpoint known to be complete
        self._resume: dict[str, Any] | None = None
        self._result: FitResult | None = None
        self._stale = 0
        self._partial: dict[str, Any] | None = None
        self._bad_seen = 0
        self._last_save = time.monotonic()
        self._signals = SignalHook.from_env()
        self.vote = None
        if dist is not None:
            from fasttrain.train.distributed import StopVote
            self.vote = StopVote(dist)
            self.notes.extend(dist.notes)

    @property
    def model(self) -> torch.nn.Module:
        return self.engine.module

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
        # A checkpoint's partial sums are over all ranks (see _reduced_partial): rank 0 alone carries them on.
        own = partial if self.dist is None or self.dist.is_main else {}
        loss_sum = torch.full((), float(own.get("loss_sum", 0.0)), device=self.device)
        nonfinite = torch.full((), int(own.get("nonfinite", 0)), device=self.device, dtype=torch.long)
        images_seen = int(own.get("images", 0))
        started = time.perf_counter() - float(partial.get("seconds", 0.0))
        self.pass_start = self.batch_in_epoch = first
        it = iter(loader)
        try:
            return self._train_pass(it, epoch, first, n, partial, loss_sum, nonfinite, images_seen, started)
        finally:
            if self.vote is not None:
                self.vote.drain()  # every rank posted the same votes: none may stay in flight
            close = getattr(it, "close", None)  # a generator over a DataLoader: shuts its workers down now,
            if close is not None:               # not whenever a traceback holding it is collected
                close()

    def _train_pass(self, it: Any, epoch: int, first: int, n: int, partial: dict[str, Any], loss_sum: torch.Tensor,
                    nonfinite: torch.Tensor, images_seen: int, started: float) -> dict[str, Any]:
        engine = self.engine
        pending: list[_Pending] = []
        last_log = time.perf_counter()
        for i in range(first, n):
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            log_now = i == first or i == n - 1 or (t1 - last_log) >= self.log_interval_s
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if self.cuda else None
            if ev:
                ev[0].record()
            images, targets = engine.to_device(*_unpack(batch))
            if ev:
                ev[1].record()
            t2 = time.perf_counter()
            window, closes = window_length(i, n, self.accumulation)
            lr = self.schedule.current()  # the LR this batch's optimizer step uses
            loss = self._forward_backward(images, targets, window, i % self.accumulation == 0, epoch, i, closes)
            ok = torch.isfinite(loss)  # kept on the device: no sync per step
            loss_sum += torch.where(ok, loss, 0.0)
            nonfinite += ~ok
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
            images_seen += bs
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
            pending.append(_Pending(fields, tuple(ev) if ev else None))
            self.batch_in_epoch = i + 1
            if log_now or not self.cuda:  # a CPU reads device values for free; CUDA waits for a logged step
                self._check_nonfinite(epoch, i, lr)
            if log_now:
                self._flush(pending)
                pending = []
                last_log = time.perf_counter()
            if closes and i + 1 < n:
                self._signals.after_step(self.schedule.step)
                stopping = self.stop is not None and self.stop.requested is not None
                due = self.save_every_s is not None and time.monotonic() - self._last_save >= self.save_every_s
                if self.vote is not None:  # every rank acts on the same (stop, due), one step after it was posted
                    signal, due = self.vote.exchange(self._signal_seen(), due)
                    stopping = self._agreed_stop(signal)
                if stopping or due:
                    self._flush(pending)
                    pending = []
                    self._partial = self._reduced_partial(float(loss_sum), int(nonfinite), images_seen,
                                                          time.perf_counter() - started)
                    path = self._save_mid_epoch(epoch)
                    if stopping:
                        raise Interrupted(self.stop, path, epoch, i + 1, self.schedule.step)  # type: ignore[arg-type]
        self._flush(pending)
        self._partial = None
        loss_total, bad_total = float(loss_sum), int(nonfinite)
        if self.dist is not None:
            loss_total, bad, images = self.dist.sums(loss_total, bad_total, images_seen)
            bad_total, images_seen = int(bad), int(images)
        seen_batches = self.batch_in_epoch * self.world   # loader batches over all ranks
        self.nonfinite_total += bad_total - int(partial.get("nonfinite", 0))
        # fp16 overflows now and then (the GradScaler skips those steps); a whole epoch of them is divergence.
        if seen_batches and bad_total == seen_batches:
            raise JobFailed(f"training diverged in epoch {epoch + 1}: every training loss was NaN or infinite "
                            f"(LR {self.schedule.current():.4g}); lower optim.base_lr or set optim.clip_grad_norm")
        mean_loss = loss_total / max(1, seen_batches - bad_total)
        return {"train_loss": mean_loss, "train_nonfinite_batches": bad_total, "train_images": images_seen,
                "train_s": time.perf_counter() - started}

    def _signal_seen(self) -> int:
        """The stop signal this rank received itself (0: none), for the vote."""
        return (self.stop.requested or 0) if self.stop is not None else 0

    def _agreed_stop(self, signal: int) -> bool:
        """A rank that received no signal itself stops for the one another rank received."""
        if signal and self.stop is not None and self.stop.requested is None:
            self.stop.requested = signal
        return bool(signal) and self.stop is not None

    def _reduced_partial(self, loss_sum: float, nonfinite: int, images: int, seconds: float) -> dict[str, Any]:
        """The epoch's sums so far for a mid-epoch checkpoint: over all ranks (every rank is at this step)."""
        if self.dist is not None:
            loss_sum, bad, images_f = self.dist.sums(loss_sum, nonfinite, images)
            nonfinite, images = int(bad), int(images_f)
        return {"loss_sum": loss_sum, "nonfinite": nonfinite, "images": images, "seconds": seconds}

    # -- faults --------------------------------------------------------------------------------------
    def _forward_backward(self, images: torch.Tensor, targets: torch.Tensor, window: int, first_in_window: bool,
                          epoch: int, index: int, sync: bool = True) -> torch.Tensor:
        """forward_backward, retried on the same data as smaller micro-batches while it runs out of memory."""
        engine = self.engine
        while True:
            stash = None if first_in_window else engine.take_grads()
            try:
                loss = engine.forward_backward(images, targets, window, sync)
            except Exception as exc:  # noqa: BLE001 - only out-of-memory is handled, the rest re-raised
                if not self.oom_backoff or not is_out_of_memory(exc):
                    raise
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            else:
                if stash is not None:
                    engine.give_back_grads(stash, keep_new=True)
                return loss
            # Outside the except block: the exception and the frames holding the step's tensors are gone.
            if stash is not None:
                engine.give_back_grads(stash, keep_new=False)
            else:
                engine.optimizer.zero_grad(set_to_none=True)
            free_device_memory(self.device)
            self._back_off(int(targets.shape[0]), epoch, index, reason)

    def _back_off(self, batch: int, epoch: int, index: int, reason: str) -> None:
        engine = self.engine
        before = engine.micro_batch(batch)
        where = f"step {self.schedule.step + 1} (epoch {epoch + 1}, batch {index + 1})"
        if before <= 1:
            raise JobFailed(f"out of memory at {where} with a per-device batch of 1 ({reason}); nothing left to "
                            "halve: use a smaller model or loader.image_size, or set "
                            "speed.activation_checkpointing=true")
        engine.splits *= 2
        after = engine.micro_batch(batch)
        acc_before, acc_after = self.accumulation * engine.splits // 2, self.accumulation * engine.splits
        effective = self.plan.batch_size * self.accumulation * max(1, self.plan.world_size)
        self.oom_events.append({"epoch": epoch + 1, "batch": index + 1, "step": self.schedule.step + 1,
                                "batch_from": before, "batch_to": after, "accumulation_from": acc_before,
                                "accumulation_to": acc_after, "effective_batch": effective,
                                "lr": self.schedule.current()})
        self._warn(f"out of memory at {where}: per-device batch {before} -> {after}, accumulation {acc_before} -> "
                   f"{acc_after}; effective batch {effective} and LR {self.schedule.current():.4g} unchanged, "
                   "same data retried")

    def _check_nonfinite(self, epoch: int, index: int, lr: float) -> None:
        worst = self.nonfinite.read_and_reset()
        if self.on_nan != "stop" or worst < MAX_NONFINITE_STREAK:
            return
        good = str(self.last_good) if self.last_good is not None else "none written yet"
        raise JobFailed(f"{worst} steps in a row had a non-finite loss or gradients, the last at optimizer step "
                        f"{self.schedule.step} (epoch {epoch + 1}, batch {index + 1}, LR {lr:.4g}); their updates "
                        f"were skipped and nothing was saved after them. Last good checkpoint: {good} (intact). "
                        "Lower optim.base_lr, set optim.clip_grad_norm, or use --on-nan skip")

    def _save_mid_epoch(self, epoch: int) -> Path | None:
        self._last_save = time.monotonic()
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

    def _flush(self, pending: list[_Pending]) -> None:
        if not pending:
            return
        if pending[-1].events is not None:
            pending[-1].events[2].synchronize()  # every earlier event is complete once the last one is
        tel = self.io.telemetry
        if self.io.bad_files is not None:
            bad = self.io.bad_files()
            if len(bad) > self._bad_seen:
                self._bad_seen = len(bad)
                self.listeners.on_message(f"skipped {len(bad)} unreadable image file(s) so far, latest {bad[-1]} "
                                          "(--strict-data stops instead)", level="warning")
        rec = None
        for p in pending:
            if p.events is not None:
                start, copied, done = p.events
                p.fields["h2d_s"] = start.elapsed_time(copied) / 1000.0
                p.fields["compute_s"] = copied.elapsed_time(done) / 1000.0
            if tel is not None:
                from fasttrain.telemetry.recorder import StepRecord
                rec = StepRecord(**p.fields)
                tel.record(rec)
        snapshot = tel.snapshot() if tel is not None else {}
        self.listeners.on_step(StepEvent(pending[-1].fields, rec, snapshot))

    # -- validation ----------------------------------------------------------------------------------
    @torch.no_grad()
    def validate(self, loader: Iterable[Any], max_batches: int | None = None) -> dict[str, Any]:
        """Loss, acc@1 and (with 5 or more classes) acc@5 over the validation set; one sync at the end."""
        engine = self.engine
        engine.train_mode(False)
        # Under DDP the eager module: DDP's forward may broadcast buffers, a collective that ranks with unequal
        # validation shards would not all reach.
        run = engine.module if self.dist is not None else engine.runner
        loss_sum = torch.zeros((), device=self.device)
        top1 = torch.zeros((), device=self.device, dtype=torch.long)
        top5 = torch.zeros((), device=self.device, dtype=torch.long)
        count, classes, started = 0, None, time.perf_counter()
        for i, batch in enumerate(loader):
            if max_batches is not None and i >= max_batches:
                break
            images, targets = engine.to_device(*_unpack(batch))
            with self.precision.autocast():
                logits = run(images)
            logits = logits.float()
            classes = logits.shape[1]
            loss_sum += torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
            k = min(5, classes)
            hits = logits.topk(k, dim=1).indices.eq(targets[:, None])
            top1 += hits[:, :1].sum()
            top5 += hits.sum()
            count += int(targets.shape[0])
        if run is engine.runner:
            engine.compiled_step_ok()
        engine.train_mode(True)
        loss, hits1, hits5 = float(loss_sum), int(top1), int(top5)
        if self.dist is not None:
            loss, h1, h5, n = self.dist.sums(loss, hits1, hits5, count)
            hits1, hits5, count = int(h1), int(h5), int(n)
            classes = self.dist.max(classes or 0) or None  # a rank with an empty shard saw no logits
        if count == 0:
            return {"val_loss": None, "val_acc1": None, "val_acc5": None, "val_images": 0, "val_s": 0.0}
        return {"val_loss": loss / count, "val_acc1": hits1 / count,
                "val_acc5": hits5 / count if classes is not None and classes >= 5 else None,
                "val_images": count, "val_s": time.perf_counter() - started}

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
                self.epoch, self.batch_in_epoch = epoch, 0
                if set_epoch is not None:
                    set_epoch(epoch)
                first = first_batch if epoch == first_epoch else 0
                row: dict[str, Any] = {"epoch": epoch + 1, **self.train_epoch(
                    train_loader, epoch, first=first, partial=resume.get("partial") if first else None)}
                if val_loader is not None:
                    row.update(self.validate(val_loader))
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
                    self._last_save = time.monotonic()
                    payload = self.state(epoch + 1, row, pass_done)  # every rank: the RNG states are gathered
                    if io.checkpoints is not None:
                        written = io.checkpoints.save_epoch(payload, epoch, is_best)
                        self._note_saved(written[0] if written else None)
                self.listeners.on_epoch_end(row)
                if patience is not None and acc is not None and stale >= patience:
                    result.stopped_early = True
                    self._warn(f"early stop after epoch {epoch + 1}: no better val acc@1 for {patience} epochs")
                    break
                stopping = self.stop is not None and self.stop.requested is not None
                if self.dist is not None:
                    stopping = self._agreed_stop(self.dist.max(self._signal_seen()))
                if stopping and epoch + 1 < epochs:
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
            "micro_batch_splits": self.engine.splits, "oom_events": list(self.oom_events),
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
        self.oom_events = list(payload.get("oom_events") or [])
        self.nonfinite_total = int(payload.get("nonfinite_total") or 0)
        self._resume = payload
        self.last_good = Path(path)


def _unpack(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(images, targets) or (images, targets, extra...) as a DataLoader hands it over."""
    if isinstance(batch, dict):
        return batch["images"], batch["targets"]
    return batch[0], batch[1]


def run_synthetic_steps(plan: Plan, model: torch.nn.Module, *, image_size: int, num_classes: int, steps: int,
                        warmup_steps: int, optim: OptimSpec | None = None, in_chans: int = 3,
                        warn: Callable[[str], None] | None = None) -> dict[str, float]:
    """Time `steps` training steps of the real step code on random tensors made on the device.

    Warm-up steps (compilation, cudnn autotuning, allocator growth) are not timed. -> images_per_s,
    step_time_s (seconds per loader batch: forward + backward, optimizer step at each window's end) and
    peak_memory_bytes (CUDA: peak allocated by tensors; CPU: the process's peak resident set).
    """
    from fasttrain.datasets.build import SyntheticBatches

    optim = optim or OptimSpec()
    trainer = Trainer(plan, optim, model, steps_per_epoch=warmup_steps + steps,
                      collaborators=Collaborators(warn=warn or (lambda text: None)))
    trainer.oom_backoff = False
    device = trainer.device
    # The very loop `train --data synthetic` runs (train_epoch over SyntheticBatches, with its non-finite guard
    # and bookkeeping), so --measure differs from a real run only by what a run adds around the steps.
    data = SyntheticBatches(plan.batch_size, image_size, num_classes, device, warmup_steps + steps,
                            channels=in_chans)
    if warmup_steps:
        trainer.train_epoch(data, 0, batches=warmup_steps)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    trainer.train_epoch(data, 0, batches=steps)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = max(time.perf_counter() - started, 1e-9)
    if device.type == "cuda":
        peak = int(torch.cuda.max_memory_allocated(device))
    else:
        peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB
    return {"images_per_s": steps * plan.batch_size / elapsed, "step_time_s": elapsed / max(1, steps),
            "peak_memory_bytes": peak}
