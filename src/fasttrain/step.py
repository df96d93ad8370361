"""One training step, shared by `train`, `estimate --measure` (run_synthetic_steps) and the benchmarks.

A micro-step is forward + backward of one loader batch; an optimizer step closes an accumulation
window. Nothing here reads a value back from the device: the caller decides when to sync (logged steps).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from fasttrain.model_setup import CompileGuard
from fasttrain.optim import LRSchedule
from fasttrain.precision import Precision

_get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)


class StepEngine:
    def __init__(self, module: torch.nn.Module, runner: Callable[..., Any], optimizer: torch.optim.Optimizer,
                 precision: Precision, schedule: LRSchedule, *, device: torch.device, channels_last: bool,
                 non_blocking: bool, clip_grad_norm: float | None, label_smoothing: float = 0.0,
                 mixup: Callable[..., Any] | None = None):
        self.module = module            # eager module: owns the weights, state_dict, train()/eval()
        self.runner = runner            # what to call: the module itself or a CompileGuard around it
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

    def forward_backward(self, images: torch.Tensor, targets: torch.Tensor, window: int) -> torch.Tensor:
        """Loss divided by the length of its accumulation window, so the summed gradient of a window is the
        gradient of the window's mean loss (a final short window divides by its real length). -> detached loss."""
        if self.mixup is not None and targets.dim() == 1:
            images, targets = self.mixup(images, targets)
        guard = self.runner if isinstance(self.runner, CompileGuard) else None
        try:
            loss = self._forward_backward(images, targets, window)
        except Exception as exc:
            if guard is None or not guard.active or self.module.training in guard._verified:
                raise
            guard.fall_back(exc)  # compiled backward failed on its first run: redo this batch eagerly
            self.optimizer.zero_grad(set_to_none=True)
            loss = self._forward_backward(images, targets, window)
        if guard is not None:
            guard.verified()
        return loss

    def _forward_backward(self, images: torch.Tensor, targets: torch.Tensor, window: int) -> torch.Tensor:
        with self.precision.autocast():
            logits = self.runner(images)
        loss = self.loss(logits, targets)
        scaled = loss / window
        if self.precision.scaler is not None:
            self.precision.scaler.scale(scaled).backward()
        else:
            scaled.backward()
        return loss.detach()

    def optimizer_step(self, want_norm: bool = False) -> torch.Tensor | None:
        """Unscale, clip, step, zero. Clipping must see true gradients, so the GradScaler unscales first.
        -> total gradient norm (a device tensor) when clipping or when asked, else None."""
        scaler = self.precision.scaler
        self.schedule.apply()
        norm = None
        if self.clip_grad_norm is not None or want_norm:
            if scaler is not None:
                scaler.unscale_(self.optimizer)
            if self.clip_grad_norm is not None:
                norm = torch.nn.utils.clip_grad_norm_(self.params, self.clip_grad_norm)
            else:
                norm = _total_norm(self.params)
        if scaler is not None:
            scaler.step(self.optimizer)   # skips the step when the gradients hold inf/NaN
            scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.schedule.advance()
        return norm


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
