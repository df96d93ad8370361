"""One training step: a loader batch in, a `StepOutcome` out. Shared by `train`, `estimate --measure`
(synthetic.py), the tuning trial and the benchmarks.

The order of a step (docs/architecture.md draws it with the file of each stage):
  1. copy the batch to the device (transfer.py): pinned memory and non_blocking, channels_last in the same copy,
     on CUDA a side stream the compute waits for; uint8 batches normalised there (4x less to copy)
  2. mixup (once, before any retry), forward under autocast, the loss, backward through the precision's scaler
     (precision.py), the loss divided by its accumulation window's length; out of memory: the same data again as
     smaller micro-batches (backoff.py keeps the count and says so)
  3. when the batch closes its accumulation window: the LR of this step, unscale, clip, the guarded optimizer
     step, zero the gradients (precision.py skips a step whose gradients are not finite)
  4. the non-finite guard counts a bad loss or bad gradients (precision.py), on the device
Nothing here reads a value back from the device: the loop decides when to sync (logged steps).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

import torch

from fasttrain.datasets.fast_decode import normalise_batch
from fasttrain.models.setup import CompileGuard, prepare_model
from fasttrain.plan import Plan
from fasttrain.profiles.schema import OptimSpec
from fasttrain.train.loop.backoff import OomBackoff
from fasttrain.train.loop.batches import Batch, unpack_batch, window_length
from fasttrain.train.loop.ema import WeightAverage
from fasttrain.train.loop.forward_backward import ForwardBackward, StepSettings
from fasttrain.train.loop.oom import is_out_of_memory
from fasttrain.train.loop.optim import LRSchedule, build_optimizer
from fasttrain.train.loop.outcome import StepOutcome, StepTiming
from fasttrain.train.loop.precision import NonFiniteGuard, Precision, make_precision, total_norm
from fasttrain.train.loop.transfer import DeviceCopy
from fasttrain.train.loop.weak_sink import weak_sink

if TYPE_CHECKING:
    from fasttrain.train.parallel.ddp import DistContext

__all__ = ["StepEngine", "StepOutcome", "StepSettings", "Warnings"]


class Warnings:
    """Where the engine's warnings go (a compile fallback, an out-of-memory back-off): the builder's callback
    until the loop that runs the engine takes them over (StepEngine.on_warning)."""

    def __init__(self, sink: Callable[[str], None]):
        self.sink = sink

    def __call__(self, text: str) -> None:
        self.sink(text)


class StepEngine(ForwardBackward):
    """One model's training step and everything it owns: the module, the optimizer and LR schedule, the precision,
    the out-of-memory back-off and the non-finite guard."""

    def __init__(self, module: torch.nn.Module, runner: Callable[..., Any], optimizer: torch.optim.Optimizer,
                 schedule: LRSchedule, precision: Precision, settings: StepSettings, backoff: OomBackoff, *,
                 mixup: Callable[..., Any] | None = None, notes: list[str] | None = None,
                 warnings: Warnings | None = None):
        self.module = module            # eager module: owns the weights, state_dict, train()/eval()
        self.runner = runner            # what to call: the module (or its DDP wrapper), or a CompileGuard around it
        # The outermost module: train()/eval() go through it (a DDP wrapper passes them on) and no_sync() is its.
        # not a CompileGuard, the runner is the module itself or its DDP wrapper, both Modules
        self.top = runner.eager if isinstance(runner, CompileGuard) else cast(torch.nn.Module, runner)
        self.optimizer, self.schedule, self.precision = optimizer, schedule, precision
        self.settings = settings
        self.backoff = backoff
        self.mixup = mixup
        self.device = torch.device(settings.device)
        self.cuda = self.device.type == "cuda"
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.guard = NonFiniteGuard(self.device)
        self.copy = DeviceCopy(self.device, channels_last=settings.channels_last, non_blocking=settings.non_blocking)
        self.ema: WeightAverage | None = None  # the moving average of the module when optim.ema_decay asks for it
        self.notes = list(notes or [])  # what getting the model ready said (threads, checkpointing, ...)
        self.warnings = warnings or Warnings(lambda text: None)

    @classmethod
    def build(cls, plan: Plan, optim: OptimSpec, model: torch.nn.Module, *, batches_per_epoch: int,
              activation_checkpointing: bool = False, mixup: Callable[..., Any] | None = None,
              dist: DistContext | None = None, warn: Callable[[str], None] = lambda text: None,
              oom_backoff: bool = True, nonfinite_guard: bool = True) -> StepEngine:
        """The model made ready for the plan (device, channels_last, DDP, compile), its optimizer, schedule and
        precision. The back-off is off under DDP (one rank cannot change the batch alone) and where the caller
        must see an out-of-memory error itself (the batch search); the non-finite guard is off where steps are
        timed against a plain loop (`bench speedups`)."""
        warnings = Warnings(warn)
        module, runner, notes = prepare_model(model, plan, activation_checkpointing=activation_checkpointing,
                                              warn=warnings, wrap=dist.wrap if dist is not None else None,
                                              not_compilers=is_out_of_memory)
        optimizer = build_optimizer(module, optim, plan.scaled_lr, fused=plan.fused_optimizer)
        accumulation = max(1, plan.accumulation_steps)
        schedule = LRSchedule.from_spec(optimizer, optim, peak_lr=plan.scaled_lr,
                                        steps_per_epoch=math.ceil(max(1, batches_per_epoch) / accumulation))
        settings = StepSettings(accumulation, plan.channels_last, plan.pin_memory, optim.clip_grad_norm,
                                optim.label_smoothing, plan.device, plan.batch_size)
        backoff = OomBackoff(plan.effective_batch, warnings, enabled=oom_backoff and dist is None)
        precision = make_precision(plan.precision, plan.device, guard=nonfinite_guard)
        engine = cls(module, runner, optimizer, schedule, precision, settings, backoff, mixup=mixup,
                     notes=notes + (dist.notes if dist is not None else []), warnings=warnings)
        if optim.ema_decay is not None:  # of the unwrapped module, on its device: ema.py's tensor pairs are its own
            engine.ema = WeightAverage(module, optim.ema_decay)
        return engine

    # -- the step ------------------------------------------------------------------------------------
    def step(self, batch: Batch, index: int, batches: int, *, epoch: int, measure: bool) -> StepOutcome:
        """Train loader batch `index` of `batches` in epoch `epoch` (0-based). `measure`: also take the gradient
        norm and the fp16 scale before the step (a logged step reads them back)."""
        started = time.perf_counter()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(3)] if self.cuda else None
        if events:
            events[0].record()
        images, targets = self.to_device(*unpack_batch(batch))
        if events:
            events[1].record()
        copied = time.perf_counter()
        if self.mixup is not None and targets.dim() == 1:  # once: an out-of-memory retry reuses these images
            images, targets = self.mixup(images, targets)    # (timm mixes in place; mixing twice is wrong)
        accumulation = self.settings.accumulation
        window, closes = window_length(index, batches, accumulation)
        lr = self.schedule.current()
        loss = self.retrying(images, targets, window, index % accumulation == 0, closes, where=(epoch, index))
        loss_ok = torch.isfinite(loss)  # kept on the device: no sync per step
        scale_before = self.precision.scale_snapshot() if measure and closes else None  # on the device: no sync
        norm = self.optimizer_step(want_norm=measure, at=(epoch, index, int(targets.shape[0]))) if closes else None
        bad = ~loss_ok
        if closes and self.precision.guard_found_inf is not None:
            bad = bad | (self.precision.guard_found_inf > 0)  # fp32/bf16: gradients non-finite, step skipped
        self.guard.record(bad)
        if events:
            events[2].record()
        done = time.perf_counter()
        n = int(targets.shape[0])
        marks = (events[0], events[1], events[2]) if events else None  # copy started, copy done, compute done
        return StepOutcome(loss, loss_ok, bad, norm, closes, n, lr, self.schedule.step, self.micro_batch(n),
                           self.accumulation_steps, scale_before, self.precision.scale_snapshot() if measure else None,
                           StepTiming(copied - started, done - copied, done, marks))

    def to_device(self, images: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The copy (transfer.py: channels_last in it, a side stream on CUDA); uint8 batches (the fast decode and
        shard paths) are normalised on the device, after the 4x smaller copy, on the compute stream."""
        images, targets = self.copy(images, targets)
        normalised = normalise_batch(images)
        assert normalised is not None  # a tensor in, a tensor out
        return normalised, targets

    def optimizer_step(self, want_norm: bool = False, at: tuple[int, int, int] = (0, 0, 0)) -> torch.Tensor | None:
        """LR, unscale, clip, step, zero. Clipping must see true gradients, so the precision unscales first.
        Out of memory in the step: the back-off retries it once (backoff.py). `at`: (epoch, batch index, samples).
        -> total gradient norm (a device tensor) when clipping or when asked, else None."""
        self.schedule.apply()
        norm = None
        clip = self.settings.clip_grad_norm
        if clip is not None or want_norm:
            self.precision.unscale_(self.optimizer)
            norm = torch.nn.utils.clip_grad_norm_(self.params, clip) if clip is not None else total_norm(self.params)
        self.backoff.retry_optimizer_step(lambda: self.precision.optimizer_step(self.optimizer, self.params, norm),
                                          self.optimizer, self.device, self.schedule, at)
        self.optimizer.zero_grad(set_to_none=True)
        self.schedule.advance()
        if self.ema is not None:
            self.ema.update(self.schedule.step)
        return norm

    # -- state: everything a resume needs of the engine ---------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The weights, the optimizer, the LR schedule, fp16's loss scaler, the back-off and the moving average,
        each its own state_dict(), under the keys a checkpoint file holds them (RunState's fields of the same
        names, state/run_state.py ENGINE_ENTRIES: the file format does not change with this object)."""
        return {"model": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                "schedule": self.schedule.state_dict(), "scaler": self.precision.state_dict(),
                **self.backoff.state_dict(), "ema": self.ema.state_dict() if self.ema is not None else None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """What state_dict() returned (or a checkpoint's entries), back into this engine: the next step is the
        one the saved engine would have taken. Weights that do not fit raise torch's RuntimeError, an optimizer
        state that does not fit its KeyError or ValueError (state/checkpoint.py names the file first)."""
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.precision.load_state_dict(state.get("scaler"))
        self.schedule.load_state_dict(state["schedule"])
        self.backoff.load_state_dict(state)
        if self.ema is not None and state.get("ema"):  # a run without one before: the average starts as a copy
            self.ema.load_state_dict(state["ema"])

    # -- around the step -----------------------------------------------------------------------------
    def drop_open_window(self) -> None:
        """Forget the gradients of an accumulation window that will not close (a stop inside it): the resumed run
        trains its micro-batches again from the same weights."""
        self.optimizer.zero_grad(set_to_none=True)

    def on_warning(self, sink: Callable[[str], None]) -> None:
        """From now on the engine's warnings go to `sink` (the loop's: deduplicated, shown, kept for the summary),
        a bound method held weakly: the loop owns the engine, and a cycle would keep it alive until a gc."""
        self.warnings.sink = weak_sink(sink)

    def train_mode(self, training: bool) -> None:
        self.top.train(training)

    @property
    def evaluated(self) -> torch.nn.Module | None:
        """The weights validation scores and best.pt keeps: the moving average when there is one, else None (the
        module as trained, through its runner)."""
        return self.ema.module if self.ema is not None else None

    @property
    def accumulation_steps(self) -> int:
        """Micro-batches per optimizer step now: the plan's accumulation times the back-off's splits."""
        return self.settings.accumulation * self.backoff.splits

