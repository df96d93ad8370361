"""The forward and backward of one loader batch, the part of a step that can fail and be tried again.

Under autocast, the loss divided by its accumulation window's length, backward through the precision's scaler
(precision.py); DDP's no_sync() around a micro-step that does not close its window. Out of memory: the same data
again as micro-batches of half the size (backoff.py keeps the count). The compiled graph's first backward in a mode
failing where its forward did not: the batch again eagerly (models/setup.py's CompileGuard warns once).
StepEngine (step.py) is this plus what surrounds it: the copy, the optimizer step, the guard, the state.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from fasttrain.models.setup import CompileGuard
from fasttrain.train.loop.backoff import OomBackoff, give_back_grads, take_grads
from fasttrain.train.loop.oom import free_device_memory, is_out_of_memory
from fasttrain.train.loop.optim import LRSchedule
from fasttrain.train.loop.precision import Precision


@dataclass(frozen=True)
class StepSettings:
    """The plan's and the profile's choices a step needs."""

    accumulation: int = 1             # loader batches per optimizer step, as planned (before any back-off)
    channels_last: bool = False
    non_blocking: bool = False        # pinned host memory: the copy may overlap compute
    clip_grad_norm: float | None = None
    label_smoothing: float = 0.0
    device: str = "cpu"               # the plan's device ("cuda": the current CUDA device, set per rank)
    batch_size: int | None = None     # the plan's per-device batch: its micro-batch is the size compile is for


class ForwardBackward:
    """The forward/backward half of StepEngine: the fields below are the engine's (set in its __init__)."""

    module: torch.nn.Module           # eager module: owns the weights, state_dict, train()/eval()
    runner: Callable[..., Any]        # what to call: the module (or its DDP wrapper), or a CompileGuard around it
    top: torch.nn.Module              # the outermost module: train()/eval() and DDP's no_sync() go through it
    optimizer: torch.optim.Optimizer
    schedule: LRSchedule
    precision: Precision
    settings: StepSettings
    backoff: OomBackoff
    device: torch.device
    params: list[torch.Tensor]        # the parameters that train

    def retrying(self, images: torch.Tensor, targets: torch.Tensor, window: int, first_in_window: bool,
                 sync: bool, *, where: tuple[int, int]) -> torch.Tensor:
        """forward_backward, retried on the same data as micro-batches of half the size while it runs out of
        memory (the effective batch and the LR stay). `first_in_window`: no earlier gradients of this
        accumulation window to keep aside. `where`: (epoch, batch index), 0-based, for the back-off's record."""
        while True:
            stash = None if first_in_window else take_grads(self.params)
            try:
                loss = self.forward_backward(images, targets, window, sync)
            except Exception as exc:
                if not self.backoff.enabled or not is_out_of_memory(exc):
                    raise
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            else:
                if stash is not None:
                    give_back_grads(self.params, stash, keep_new=True)
                return loss
            # Outside the except block: the exception and the frames holding the step's tensors are gone.
            if stash is not None:
                give_back_grads(self.params, stash, keep_new=False)
            else:
                self.optimizer.zero_grad(set_to_none=True)
            free_device_memory(self.device)
            self.backoff.halve(int(targets.shape[0]), self.settings.accumulation, self.schedule, where, reason)

    def forward_backward(self, images: torch.Tensor, targets: torch.Tensor, window: float,
                         sync: bool = True) -> torch.Tensor:
        """Loss divided by the length of its accumulation window, so the summed gradient of a window is the
        gradient of the window's mean loss (a final short window divides by its real length). -> detached loss.
        After a back-off the batch runs as micro-batches (same order), the loss their weighted mean.
        sync=False (DDP, a micro-step that does not close its window): gradients are not all-reduced yet.
        Mixup has already been applied by StepEngine.step()."""
        n, splits = int(targets.shape[0]), self.backoff.splits
        if isinstance(self.runner, CompileGuard) and self.settings.batch_size:  # the steady micro-batch is the
            self.runner.expect(True, self.micro_batch(self.settings.batch_size))  # compiled size (a resume's too)
        if splits <= 1 or n <= 1:
            return self._compiled_or_eager(images, targets, window, sync)
        parts = list(zip(images.split(math.ceil(n / splits)), targets.split(math.ceil(n / splits)), strict=True))
        total = torch.zeros((), device=targets.device)
        for k, (part_x, part_y) in enumerate(parts):
            share = int(part_y.shape[0]) / n
            total += self._compiled_or_eager(part_x, part_y, window / share, sync and k == len(parts) - 1) * share
        return total

    def _compiled_or_eager(self, images: torch.Tensor, targets: torch.Tensor, window: float,
                           sync: bool) -> torch.Tensor:
        """The compiled graph's first backward in each mode may fail where its forward did not: redo the batch
        eagerly then (CompileGuard warns once); later errors are the model's own."""
        guard = self.runner if isinstance(self.runner, CompileGuard) else None
        try:
            loss = self._forward_backward(images, targets, window, sync)
        except Exception as exc:
            if guard is None or not guard.ran_compiled or guard.is_verified(self.module.training) \
                    or is_out_of_memory(exc):
                raise
            guard.fall_back(exc)
            self.optimizer.zero_grad(set_to_none=True)
            loss = self._forward_backward(images, targets, window, sync)
        self.compiled_step_ok()
        return loss

    def _forward_backward(self, images: torch.Tensor, targets: torch.Tensor, window: float,
                          sync: bool) -> torch.Tensor:
        # DDP reads no_sync() in its forward, so the context spans forward and backward.
        no_sync = getattr(self.top, "no_sync", None)
        with no_sync() if not sync and no_sync is not None else nullcontext():
            with self.precision.autocast():
                logits = self.runner(images)
            loss = self.loss(logits, targets)
            self.precision.backward(loss / window)
        return loss.detach()

    def loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # Mixup targets are soft (already label-smoothed by timm's Mixup); plain targets get smoothing here.
        smoothing = 0.0 if targets.dtype.is_floating_point else self.settings.label_smoothing
        return F.cross_entropy(logits.float(), targets, label_smoothing=smoothing)

    def compiled_step_ok(self) -> None:
        """A whole step in the current mode ran through the compiled graph (if there is one): from now on an
        error in this mode is the model's own, raised, not a compiler failure to fall back from."""
        if isinstance(self.runner, CompileGuard):
            self.runner.verified()

    def micro_batch(self, batch: int) -> int:
        """The micro-batch a loader batch of `batch` samples runs as now."""
        return math.ceil(batch / max(1, self.backoff.splits))
