"""One training step, shared by `train`, `estimate --measure` (run_synthetic_steps) and the benchmarks.

A micro-step is forward + backward of one loader batch; an optimizer step closes an accumulation
window. Nothing here reads a value back from the device: the caller decides when to sync (logged steps).

The precision (precision.py) owns autocast, backward through its GradScaler, unscaling before clipping, the
optimizer step with its non-finite guard and the scaler's checkpoint state; this module sequences them.
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

from fasttrain.datasets.fast_decode import normalise_batch
from fasttrain.models.setup import CompileGuard
from fasttrain.train.loop.optim import LRSchedule
from fasttrain.train.loop.precision import Precision, total_norm
from fasttrain.train.loop.oom import is_out_of_memory


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
        self.splits = 1                              # micro-batches per loader batch (out-of-memory back-off)

    # -- input -------------------------------------------------------------------------------------
    def to_device(self, images: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pinned host memory + non_blocking lets the copy overlap compute; channels_last in the same copy. uint8
        batches (the fast decode and shard paths) are normalised here, on the device, after the 4x smaller copy."""
        if self.channels_last and images.dim() == 4:
            images = images.to(self.device, non_blocking=self.non_blocking, memory_format=torch.channels_last)
        else:
            images = images.to(self.device, non_blocking=self.non_blocking)
        return normalise_batch(images), targets.to(self.device, non_blocking=self.non_blocking)

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

    def _guarded(self, images: torch.Tensor, targets: torch.Tensor, window: float, sync: bool = True) -> torch.Tensor:
        guard = self.runner if isinstance(self.runner, CompileGuard) else None
        try:
            loss = self._forward_backward(images, targets, window, sync)
        except Exception as exc:
            if guard is None or not guard.active or guard.is_verified(self.module.training) \
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
            self.precision.backward(loss / window)
        return loss.detach()

    def optimizer_step(self, want_norm: bool = False) -> torch.Tensor | None:
        """Unscale, clip, step, zero. Clipping must see true gradients, so the precision unscales first.
        -> total gradient norm (a device tensor) when clipping or when asked, else None."""
        self.schedule.apply()
        norm = None
        if self.clip_grad_norm is not None or want_norm:
            self.precision.unscale_(self.optimizer)
            if self.clip_grad_norm is not None:
                norm = torch.nn.utils.clip_grad_norm_(self.params, self.clip_grad_norm)
            else:
                norm = total_norm(self.params)
        self.precision.optimizer_step(self.optimizer, self.params, norm)
        self.optimizer.zero_grad(set_to_none=True)
        self.schedule.advance()
        return norm


def window_length(batch_index: int, batches_in_epoch: int, accumulation: int) -> tuple[int, bool]:
    """(length of the accumulation window holding this batch, whether this batch closes it). Pure."""
    start = (batch_index // accumulation) * accumulation
    length = min(accumulation, batches_in_epoch - start) if batches_in_epoch > 0 else accumulation
    return max(1, length), batch_index - start == length - 1


def unpack_batch(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(images, targets) or (images, targets, extra...) as a DataLoader hands it over, or a dict of them."""
    if isinstance(batch, dict):
        return batch["images"], batch["targets"]
    return batch[0], batch[1]
