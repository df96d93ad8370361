"""Optimizer and learning-rate schedule from a profile's `optim:` section.

- Weight decay applies to weight matrices and conv kernels only: decaying norm scales and biases
  (tensors with one dimension or fewer) hurts accuracy and buys no regularisation.
- Fused kernels where the Plan asks for them (the default on CUDA and the CPU), else the multi-tensor
  `foreach` path: both replace one kernel launch per parameter with a few for all of them. On the CPU with
  channels_last weights, Adam, AdamW and SGD step through `cpu_fused` (torch's fused kernels without their
  copies).
- The LR changes per optimizer step (not per epoch): linear warm-up from lr/warmup_steps to the
  scaled LR, then cosine to zero, step decay, constant, or reduce-on-plateau after each validation.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from fasttrain.profiles.schema import OptimSpec
from fasttrain.train.loop.cpu_fused import DenseAdam, DenseAdamW, DenseSGD, wants_dense_step


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    decay: list[torch.nn.Parameter] = []
    no_decay: list[torch.nn.Parameter] = []
    for _, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim <= 1 else decay).append(p)
    groups = [{"params": decay, "weight_decay": weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    return groups


def build_optimizer(model: torch.nn.Module, spec: OptimSpec, lr: float, *, fused: bool) -> torch.optim.Optimizer:
    """`fused` comes from Plan.fused_optimizer (the profile's speed.fused_optimizer). Build it after the model
    has its memory format: the choice of the step looks at the weights' layout."""
    groups = param_groups(model, spec.weight_decay)
    # fused kernels or foreach ones, never both (torch refuses both set); the other stays torch's default None
    fused_flag, foreach_flag = (True, None) if fused else (None, True)
    dense = wants_dense_step([p for group in groups for p in group["params"]], fused=fused)
    if spec.optimizer == "sgd":
        return (DenseSGD if dense else torch.optim.SGD)(groups, lr=lr, momentum=spec.momentum,
                                                        nesterov=spec.momentum > 0, fused=fused_flag,
                                                        foreach=foreach_flag)
    if spec.optimizer == "adamw":
        return (DenseAdamW if dense else torch.optim.AdamW)(groups, lr=lr, fused=fused_flag,
                                                            foreach=foreach_flag)
    if spec.optimizer == "adam":
        # Adam's own weight_decay is L2 in the gradient (not decoupled); kept as the user asked for it.
        return (DenseAdam if dense else torch.optim.Adam)(groups, lr=lr, fused=fused_flag, foreach=foreach_flag)
    raise ValueError(f"unknown optimizer {spec.optimizer!r}")


def lr_at(step: int, *, peak_lr: float, total_steps: int, warmup_steps: int, schedule: str,
          steps_per_epoch: int = 1, step_epochs: int = 30, step_gamma: float = 0.1) -> float:
    """LR for optimizer step `step` (0-based), before any plateau reductions. Pure."""
    if warmup_steps > 0 and step < warmup_steps:
        return peak_lr * (step + 1) / warmup_steps
    if schedule == "cosine":
        span = max(1, total_steps - warmup_steps)
        progress = min(1.0, (step - warmup_steps) / span)
        return peak_lr * 0.5 * (1.0 + math.cos(math.pi * progress))
    if schedule == "step":
        drops = step // max(1, step_epochs * steps_per_epoch)
        return peak_lr * step_gamma ** drops
    return peak_lr  # constant, and plateau (its reductions are a separate factor)


@dataclass
class LRSchedule:
    """Sets the LR of every param group before each optimizer step; state_dict() for resume."""

    optimizer: torch.optim.Optimizer
    peak_lr: float
    total_steps: int
    warmup_steps: int
    schedule: str
    steps_per_epoch: int = 1
    step_epochs: int = 30
    step_gamma: float = 0.1
    plateau_patience: int = 3
    warmup_target: int | None = None  # the profile's warm-up (steps); a time budget's plans cut it to a fifth of theirs
    step: int = 0                     # optimizer steps taken
    plateau_factor: float = 1.0       # product of plateau reductions so far
    _best: float = field(default=math.inf)
    _bad_epochs: int = 0

    def __post_init__(self) -> None:
        if self.warmup_target is None:
            self.warmup_target = self.warmup_steps

    @classmethod
    def from_spec(cls, optimizer: torch.optim.Optimizer, spec: OptimSpec, *, peak_lr: float,
                  steps_per_epoch: int) -> LRSchedule:
        steps_per_epoch = max(1, steps_per_epoch)
        return cls(optimizer, peak_lr, total_steps=steps_per_epoch * spec.epochs,
                   warmup_steps=round(spec.warmup_epochs * steps_per_epoch), schedule=spec.schedule,
                   steps_per_epoch=steps_per_epoch, step_epochs=spec.step_epochs, step_gamma=spec.step_gamma,
                   plateau_patience=spec.plateau_patience)

    def current(self) -> float:
        base = lr_at(self.step, peak_lr=self.peak_lr, total_steps=self.total_steps, warmup_steps=self.warmup_steps,
                     schedule=self.schedule, steps_per_epoch=self.steps_per_epoch, step_epochs=self.step_epochs,
                     step_gamma=self.step_gamma)
        return base * self.plateau_factor

    def apply(self) -> float:
        """Call before optimizer.step(): writes the LR for the step about to be taken."""
        lr = self.current()
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def advance(self) -> None:
        self.step += 1

    def replan(self, total_steps: int, *, measured: bool = True) -> None:
        """A time budget moved the end: the schedule now ends (cosine: at its floor) at optimizer step
        `total_steps`. The warm-up is the profile's, at most a fifth of the plan, and moves with each plan while
        its end is still ahead (in the first fifth of the run: the LR stays under the ramp's line, and a plan
        that grows gives back the warm-up a smaller one took); a plan with no room for it (under 5 steps: a
        guessed reserve may leave 0) leaves it alone. A `measured` plan (from step times the run measured, not
        the forecast's guess) that ends the run before the ramp would ends the ramp now, so the LR still
        reaches its floor."""
        self.total_steps = max(1, total_steps)
        wanted = min(self.warmup_target or 0, self.total_steps // 5)
        if self.step < wanted:
            self.warmup_steps = wanted
        elif measured and self.step < self.warmup_steps:
            self.warmup_steps = self.step

    def epoch_end(self, val_loss: float | None) -> None:
        """Plateau: divide the LR by 10 after `plateau_patience` epochs without a lower validation loss."""
        if self.schedule != "plateau" or val_loss is None or not math.isfinite(val_loss):
            return
        if val_loss < self._best * (1 - 1e-4):
            self._best, self._bad_epochs = val_loss, 0
            return
        self._bad_epochs += 1
        if self._bad_epochs > self.plateau_patience:
            self.plateau_factor *= 0.1
            self._bad_epochs = 0

    def state_dict(self) -> dict[str, Any]:
        return {"step": self.step, "plateau_factor": self.plateau_factor, "best": self._best,
                "bad_epochs": self._bad_epochs, "total_steps": self.total_steps, "warmup_steps": self.warmup_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step = int(state["step"])
        self.plateau_factor = float(state["plateau_factor"])
        self._best = float(state["best"])
        self._bad_epochs = int(state["bad_epochs"])
