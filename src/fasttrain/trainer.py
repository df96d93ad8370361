"""The training loop the Plan drives: epochs of timed steps, validation, checkpoints, early stopping.

Each loader batch is timed in three parts: data-wait (blocked in the loader), host-to-device copy and
compute. On a CPU the wall clock measures them directly. On CUDA the copy and the compute are
asynchronous, so they are bracketed with CUDA events and read back once per *logged* step (one sync
per log interval, never one per step); loss, gradient norm and AMP scale are read at the same moment.
Telemetry, dashboard and run log are optional collaborators (None in run_synthetic_steps and tests).
"""
from __future__ import annotations

import math
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from fasttrain.checkpoint import CheckpointPolicy, rng_states
from fasttrain.errors import JobFailed
from fasttrain.model_setup import CompileGuard, prepare_model
from fasttrain.optim import LRSchedule, build_optimizer
from fasttrain.plan import Plan
from fasttrain.precision import make_precision
from fasttrain.profile import OptimSpec, Profile
from fasttrain.step import StepEngine, window_length


@dataclass
class Collaborators:
    """What the loop reports to; every field may be None."""

    telemetry: Any = None       # telemetry.Telemetry
    dashboard: Any = None       # dashboard.Dashboard (already entered)
    runlog: Any = None          # runlog.RunLog
    checkpoints: CheckpointPolicy | None = None
    warn: Callable[[str], None] = lambda text: None


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
                 log_interval_s: float = 1.0, extra_state: Callable[[], dict[str, Any]] | None = None):
        self.plan = plan
        self.optim = optim
        self.profile = profile
        self.io = collaborators or Collaborators()
        self.device = torch.device(plan.device)
        self.log_interval_s = log_interval_s
        self.extra_state = extra_state
        self._warned: set[str] = set()
        self.notes: list[str] = []
        module, runner, notes = prepare_model(model, plan, activation_checkpointing=activation_checkpointing,
                                                   warn=self._warn)
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
        self.batch_in_epoch = 0

    @property
    def model(self) -> torch.nn.Module:
        return self.engine.module

    def _warn(self, text: str) -> None:
        if text in self._warned:
            return
        self._warned.add(text)
        self.notes.append(text)
        if self.io.dashboard is not None:
            self.io.dashboard.message(f"warning: {text}")
        self.io.warn(text)

    # -- one epoch -----------------------------------------------------------------------------------
    def train_epoch(self, loader: Iterable[Any], epoch: int, batches: int | None = None) -> dict[str, Any]:
        """Train over `loader` once (or its first `batches` batches). -> mean loss, images, seconds."""
        engine, io = self.engine, self.io
        engine.module.train()
        n = batches if batches is not None else len(loader)  # type: ignore[arg-type]
        loss_sum = torch.zeros((), device=self.device)
        nonfinite = torch.zeros((), device=self.device, dtype=torch.long)
        images_seen, pending = 0, []
        started = last_log = time.perf_counter()
        it = iter(loader)
        for i in range(n):
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            log_now = i == 0 or i == n - 1 or (t1 - last_log) >= self.log_interval_s
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if self.cuda else None
            if ev:
                ev[0].record()
            images, targets = engine.to_device(*_unpack(batch))
            if ev:
                ev[1].record()
            t2 = time.perf_counter()
            window, closes = window_length(i, n, self.accumulation)
            lr = self.schedule.current()  # the LR this batch's optimizer step uses
            loss = engine.forward_backward(images, targets, window)
            ok = torch.isfinite(loss)  # kept on the device: no sync per step
            loss_sum += torch.where(ok, loss, 0.0)
            nonfinite += ~ok
            # Reading the scale syncs a GPU, so a skipped fp16 step (inf/NaN gradients) is detected on logged steps.
            scale_before = self.precision.scale if log_now and closes and self.precision.scaler is not None else None
            norm = engine.optimizer_step(want_norm=log_now) if closes else None
            if ev:
                ev[2].record()
            t3 = time.perf_counter()
            bs = int(targets.shape[0])
            images_seen += bs
            fields = dict(epoch=epoch, step=self.schedule.step, batch_index=i, batches_in_epoch=n, images=bs,
                          data_wait_s=t1 - t0, h2d_s=t2 - t1, compute_s=t3 - t2, loss=None,
                          lr=lr, grad_norm=None, amp_scale=None, skipped=False,
                          batch_size=bs, accumulation_steps=self.accumulation, end_time=t3)
            if log_now:
                fields["loss"] = float(loss)          # the one sync of this log interval
                fields["grad_norm"] = float(norm) if norm is not None else None
                fields["amp_scale"] = self.precision.scale
                fields["skipped"] = scale_before is not None and fields["amp_scale"] < scale_before
            pending.append(_Pending(fields, tuple(ev) if ev else None))
            self.batch_in_epoch = i + 1
            if log_now:
                self._flush(pending)
                pending = []
                last_log = time.perf_counter()
        self._flush(pending)
        seen_batches, bad = self.batch_in_epoch, int(nonfinite)
        # fp16 overflows now and then (the GradScaler skips those steps); a whole epoch of them is divergence.
        if seen_batches and bad == seen_batches:
            raise JobFailed(f"training diverged in epoch {epoch + 1}: every training loss was NaN or infinite "
                            f"(LR {self.schedule.current():.4g}); lower optim.base_lr or set optim.clip_grad_norm")
        mean_loss = float(loss_sum) / max(1, seen_batches - bad)
        return {"train_loss": mean_loss, "train_nonfinite_batches": bad, "train_images": images_seen,
                "train_s": time.perf_counter() - started}

    def _flush(self, pending: list[_Pending]) -> None:
        if not pending:
            return
        if pending[-1].events is not None:
            pending[-1].events[2].synchronize()  # every earlier event is complete once the last one is
        tel, dash, log = self.io.telemetry, self.io.dashboard, self.io.runlog
        rec = None
        for p in pending:
            if p.events is not None:
                start, copied, done = p.events
                p.fields["h2d_s"] = start.elapsed_time(copied) / 1000.0
                p.fields["compute_s"] = copied.elapsed_time(done) / 1000.0
            if tel is not None:
                from fasttrain.telemetry import StepRecord
                rec = StepRecord(**p.fields)
                tel.record(rec)
        last = pending[-1].fields
        snapshot = tel.snapshot() if tel is not None else {}
        if dash is not None and rec is not None:
            dash.update(snapshot, rec)
        if log is not None:
            row = {k: v for k, v in last.items() if k != "end_time"}  # perf_counter stamp: meaningless in a log
            for key in ("images_per_s", "it_per_s"):
                if key in snapshot:
                    row[key] = snapshot[key]
            log.log_step(row)

    # -- validation ----------------------------------------------------------------------------------
    @torch.no_grad()
    def validate(self, loader: Iterable[Any], max_batches: int | None = None) -> dict[str, Any]:
        """Loss, acc@1 and (with 5 or more classes) acc@5 over the validation set; one sync at the end."""
        engine = self.engine
        engine.module.eval()
        loss_sum = torch.zeros((), device=self.device)
        top1 = torch.zeros((), device=self.device, dtype=torch.long)
        top5 = torch.zeros((), device=self.device, dtype=torch.long)
        count, classes, started = 0, None, time.perf_counter()
        for i, batch in enumerate(loader):
            if max_batches is not None and i >= max_batches:
                break
            images, targets = engine.to_device(*_unpack(batch))
            with self.precision.autocast():
                logits = engine.runner(images)
            logits = logits.float()
            classes = logits.shape[1]
            loss_sum += torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
            k = min(5, classes)
            hits = logits.topk(k, dim=1).indices.eq(targets[:, None])
            top1 += hits[:, :1].sum()
            top5 += hits.sum()
            count += int(targets.shape[0])
        if isinstance(engine.runner, CompileGuard):
            engine.runner.verified()
        engine.module.train()
        if count == 0:
            return {"val_loss": None, "val_acc1": None, "val_acc5": None, "val_images": 0, "val_s": 0.0}
        return {"val_loss": float(loss_sum) / count, "val_acc1": float(top1) / count,
                "val_acc5": float(top5) / count if classes is not None and classes >= 5 else None,
                "val_images": count, "val_s": time.perf_counter() - started}

    # -- the whole run -------------------------------------------------------------------------------
    def fit(self, train_loader: Iterable[Any], val_loader: Iterable[Any] | None, epochs: int, *,
            set_epoch: Callable[[int], None] | None = None, start_epoch: int = 0) -> FitResult:
        io = self.io
        started = time.perf_counter()
        result = FitResult(epochs_run=0, best_acc1=None, best_epoch=None, stopped_early=False, notes=self.notes)
        if val_loader is not None:  # fail in seconds, not after a whole epoch, when validation is broken
            result.sanity = self.validate(val_loader, max_batches=2)
        if io.telemetry is not None:
            io.telemetry.start()
        patience = self.optim.early_stopping_patience
        stale = 0
        try:
            for epoch in range(start_epoch, epochs):
                self.epoch, self.batch_in_epoch = epoch, 0
                if set_epoch is not None:
                    set_epoch(epoch)
                row: dict[str, Any] = {"epoch": epoch + 1, **self.train_epoch(train_loader, epoch)}
                if val_loader is not None:
                    row.update(self.validate(val_loader))
                row["lr"] = self.schedule.current()
                if io.telemetry is not None:
                    row.update({f"telemetry_{k}": v for k, v in io.telemetry.epoch_stats().items()})
                self.schedule.epoch_end(row.get("val_loss"))
                acc = row.get("val_acc1")
                is_best = acc is not None and (result.best_acc1 is None or acc > result.best_acc1)
                if is_best:
                    result.best_acc1, result.best_epoch, stale = acc, epoch + 1, 0
                else:
                    stale += 1
                self.batch_in_epoch = 0
                if io.checkpoints is not None:
                    io.checkpoints.save_epoch(self.state(epoch + 1, row), epoch, is_best)
                result.history.append(row)
                result.epochs_run += 1
                if io.runlog is not None:
                    io.runlog.log_epoch(row)
                if io.dashboard is not None:
                    io.dashboard.epoch_end(row)
                if patience is not None and acc is not None and stale >= patience:
                    result.stopped_early = True
                    self._warn(f"early stop after epoch {epoch + 1}: no better val acc@1 for {patience} epochs")
                    break
        finally:
            if io.telemetry is not None:
                io.telemetry.stop()
        result.wall_s = time.perf_counter() - started
        return result

    def state(self, next_epoch: int, row: dict[str, Any] | None = None) -> dict[str, Any]:
        """Everything an exact resume needs; `next_epoch`/`batch_in_epoch` say where to continue."""
        scaler = self.precision.scaler
        payload: dict[str, Any] = {
            "model": self.model.state_dict(), "optimizer": self.engine.optimizer.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "schedule": self.schedule.state_dict(), "epoch": next_epoch, "batch_in_epoch": self.batch_in_epoch,
            "rng": rng_states(), "plan": self.plan.to_dict(), "metrics": row or {},
            "profile": self.profile.model_dump(mode="json") if self.profile is not None else None,
        }
        if self.extra_state is not None:
            payload.update(self.extra_state())
        return payload


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
    optim = optim or OptimSpec()
    trainer = Trainer(plan, optim, model, steps_per_epoch=warmup_steps + steps,
                      collaborators=Collaborators(warn=warn or (lambda text: None)))
    device, engine = trainer.device, trainer.engine
    gen = torch.Generator(device="cpu").manual_seed(0)
    images = torch.randn(plan.batch_size, in_chans, image_size, image_size, generator=gen)
    targets = torch.randint(0, num_classes, (plan.batch_size,), generator=gen)
    images, targets = engine.to_device(images, targets)
    engine.module.train()
    total = warmup_steps + steps

    def one(i: int) -> None:
        window, closes = window_length(i, total, trainer.accumulation)
        engine.forward_backward(images, targets, window)
        if closes:
            engine.optimizer_step()

    for i in range(warmup_steps):
        one(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    for i in range(warmup_steps, total):
        one(i)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = max(time.perf_counter() - started, 1e-9)
    if device.type == "cuda":
        peak = int(torch.cuda.max_memory_allocated(device))
    else:
        peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB
    return {"images_per_s": steps * plan.batch_size / elapsed, "step_time_s": elapsed / max(1, steps),
            "peak_memory_bytes": peak}
