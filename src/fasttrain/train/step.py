"""One training step, shared by `train`, `estimate --measure` (run_synthetic_steps) and the benchmarks.

A micro-step is forward + backward of one loader batch; an optimizer step closes an accumulation
window. Nothing here reads a value back from the device: the caller decides when to sync (logged steps).

Non-finite guard (issue 6): without fp16's GradScaler, a "guard" GradScaler fixed at scale 1.0 does the same
job: it checks the gradients for inf/NaN and skips that optimizer step, so one bad batch cannot poison the
weights. Multiplying by 1.0 is exact, so the weights are bit-identical to an unguarded run. It costs one
pass over the gradients; a fused (CUDA) optimizer takes the check on the device without a sync.
Out-of-memory back-off: `splits` cuts a loader batch into that many micro-batches whose losses are weighted
by their share of the batch, so the summed gradient is the batch's (the effective batch and LR stay).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F

from fasttrain.models.setup import CompileGuard
from fasttrain.train.optim import LRSchedule
from fasttrain.train.precision import Precision
from fasttrain.train.oom import is_out_of_memory

_get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)


class StepEngine:
    def __init__(self, module: torch.nn.Module, runner: Callable[..., Any], optimizer: torch.optim.Optimizer,
                 precision: Precision, schedule: LRSchedule, *, device: torch.device, channels_last: bool,
                 non_blocking: bool, clip_grad_norm: float | None, label_smoothing: float = 0.0,
                 mixup: Callable[..., Any] | None = None):
        self.module = module            # eager module: owns the weights, state_dict, train()/eval()
        self.runner = runner            # what to call: the module (or its DDP wrapper), or a CompileGuard around it
        # The outermost module: train()/eval() go through it (a DDP wrapper passes them on) and no_sync() is its.
        self.top: torch.nn.Module = runner.eager if isinstance(runner, CompileGuard) else runner  # type: ignore[assignment]
        self.optimizer = optimizer
        self.precision = precision
        self.schedule = schedule
        self.device = device
        self.channels_last = channels_last
        self.non_blocking = non_blocking
        self.clip_grad_norm = clip_grad_norm
        self.label_smoothing = label_smoothing
        self.mixup = mixup
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.guard = _guard_scaler(device) if precision.scaler is None else None
        self.found_inf: torch.Tensor | None = None   # after optimizer_step: >0 when its gradients were not finite
        self.splits = 1                              # micro-batches per loader batch (out-of-memory back-off)
        # Training flags (train/eval) whose compiled graph has run a whole step: an error there after that is
        # the model's own, not a compiler failure to fall back from.
        self._compiled_ok: set[bool] = set()

    @property
    def scaler(self) -> Any:
        """The GradScaler that checks (and for fp16 scales) gradients: fp16's own, else the guard."""
        return self.precision.scaler if self.precision.scaler is not None else self.guard

    # -- input -------------------------------------------------------------------------------------
    def to_device(self, images: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pinned host memory + non_blocking lets the copy overlap compute; channels_last in the same copy."""
        if self.channels_last and images.dim() == 4:
            images = images.to(self.device, non_blocking=self.non_blocking, memory_format=torch.channels_last)
        else:
            images = images.to(self.device, non_blocking=self.non_blocking)
        return images, targets.to(self.device, non_blocking=self.non_blocking)

    # -- compute -----------------------------------------------------------------------------------
    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # Mixup targets are soft (already label-smoothed by timm's Mixup); plain targets get smoothing here.
        smoothing = 0.0 if targets.dtype.is_floating_point else self.label_smoothing
        return F.cross_entropy(logits.float(), targets, label_smoothing=smoothing)

    def train_mode(self, training: bool) -> None:
        self.top.train(training)

    def forward_backward(self, images: torch.Tensor, targets: torch.Tensor, window: int,
                         sync: bool = True) -> torch.Tensor:
        """Loss divided by the length of its accumulation window, so the summed gradient of a window is the
        gradient of the window's mean loss (a final short window divides by its real length). -> detached loss.
        With self.splits > 1 the batch runs as micro-batches (same order) and the loss is their weighted mean.
        sync=False (DDP, a micro-step that does not close its window): gradients are not all-reduced yet."""
        if self.mixup is not None and targets.dim() == 1:
            images, targets = self.mixup(images, targets)
        n = int(targets.shape[0])
        if self.splits <= 1 or n <= 1:
            return self._guarded(images, targets, window, sync)
        size = math.ceil(n / self.splits)
        parts = list(zip(images.split(size), targets.split(size)))
        total = torch.zeros((), device=targets.device)
        for k, (part_x, part_y) in enumerate(parts):
            share = int(part_y.shape[0]) / n
            total += self._guarded(part_x, part_y, window / share, sync and k == len(parts) - 1) * share
        return total

    def micro_batch(self, batch: int) -> int:
        return math.ceil(batch / max(1, self.splits))

    def take_grads(self) -> list[torch.Tensor | None]:
        """Move the gradients accumulated so far aside (no copy), so a failed micro-step can be undone."""
        stash = [p.grad for p in self.params]
        for p in self.params:
            p.grad = None
        return stash

    def give_back_grads(self, stash: list[torch.Tensor | None], keep_new: bool) -> None:
        """Add the stashed gradients back (new + old: IEEE addition is commutative, so the bits equal
        autograd's own old + new), or drop the new partial ones after a failure."""
        for p, old in zip(self.params, stash):
            if not keep_new or p.grad is None:
                p.grad = old
            elif old is not None:
                p.grad.add_(old)

    def compiled_step_ok(self) -> None:
        """A whole step in the current mode ran through the compiled graph (if there is one): from now on an
        error in this mode is the model's own, raised, not a compiler failure to fall back from."""
        if isinstance(self.runner, CompileGuard):
            self.runner.verified()
            if self.runner.active:
                self._compiled_ok.add(self.module.training)

    def _guarded(self, images: torch.Tensor, targets: torch.Tensor, window: float, sync: bool = True) -> torch.Tensor:
        guard = self.runner if isinstance(self.runner, CompileGuard) else None
        try:
            loss = self._forward_backward(images, targets, window, sync)
        except Exception as exc:
            if guard is None or not guard.active or self.module.training in self._compiled_ok \
                    or is_out_of_memory(exc):
                raise
            guard.fall_back(exc)  # compiled backward failed on its first run: redo this batch eagerly
            self.optimizer.zero_grad(set_to_none=True)
            loss = self._forward_backward(images, targets, window, sync)
        self.compiled_step_ok()
        return loss

    def _forward_backward(self, images: torch.Tensor, targets: torch.Tensor, window: float,
                          sync: bool = True) -> torch.Tensor:
        # DDP reads no_sync() in its forward, so the context spans forward and backward.
        local = self.top.no_sync() if not sync and hasattr(self.top, "no_sync") else nullcontext()
        with local:
            with self.precision.autocast():
                logits = self.runner(images)
            loss = self.loss(logits, targets)
            scaled = loss / window
            scaler = self.scaler
            if scaler is not None:
                scaler.scale(scaled).backward()
            else:
                scaled.backward()
        return loss.detach()

    def optimizer_step(self, want_norm: bool = False) -> torch.Tensor | None:
        """Unscale, clip, step, zero. Clipping must see true gradients, so the GradScaler unscales first.
        -> total gradient norm (a device tensor) when clipping or when asked, else None."""
        scaler = self.scaler
        # On a CPU the guard's job is done by the gradient norm: a read-only pass and a cheap host read, where the
        # GradScaler machinery cost ~0.4 ms of Python per step (benchmarks/loop_overhead.py). On CUDA the guard
        # GradScaler stays: with a fused optimizer it skips on the device without a sync.
        host_guard = scaler is not None and scaler is self.guard and self.device.type == "cpu"
        self.schedule.apply()
        norm = None
        if self.clip_grad_norm is not None or want_norm:
            if scaler is not None and not host_guard:
                scaler.unscale_(self.optimizer)
            if self.clip_grad_norm is not None:
                norm = torch.nn.utils.clip_grad_norm_(self.params, self.clip_grad_norm)
            else:
                norm = _total_norm(self.params)
        if host_guard:
            checked = norm if norm is not None else _total_norm(self.params)
            self.found_inf = (~torch.isfinite(checked)).float()
            if not bool(self.found_inf):  # a non-finite norm means some gradient is inf/NaN: skip the update
                self.optimizer.step()
        elif scaler is not None:
            scaler.step(self.optimizer)   # skips the step when the gradients hold inf/NaN
            self.found_inf = _found_inf(scaler, self.optimizer)
            scaler.update(1.0 if scaler is self.guard else None)  # the guard never scales
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.schedule.advance()
        return norm


def _guard_scaler(device: torch.device) -> Any:
    try:  # growth never happens in practice (interval 2**30) and update(1.0) resets any back-off
        return torch.amp.GradScaler(device.type, init_scale=1.0, growth_interval=2**30)
    except (RuntimeError, ValueError, AssertionError):
        return None  # a device without GradScaler support: steps are unguarded, as before


def _found_inf(scaler: Any, optimizer: torch.optim.Optimizer) -> torch.Tensor | None:
    # GradScaler has no public "was this step skipped" answer that stays on the device; _found_inf_per_device is
    # private but stable since torch 1.6, and only informs the non-finite streak.
    try:
        found = scaler._found_inf_per_device(optimizer)
    except (AttributeError, KeyError, RuntimeError, AssertionError):
        return None
    values = list(found.values())
    return sum(values[1:], values[0]) if values else None


def _total_norm(params: list[torch.Tensor]) -> torch.Tensor:
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if _get_total_norm is not None:
        return _get_total_norm(grads)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


def window_length(batch_index: int, batches_in_epoch: int, accumulation: int) -> tuple[int, bool]:
    """(length of the accumulation window holding this batch, whether this batch closes it). Pure."""
    start = (batch_index // accumulation) * accumulation
    length = min(accumulation, batches_in_epoch - start) if batches_in_epoch > 0 else accumulation
    return max(1, length), batch_index - start == length - 1


def finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)
