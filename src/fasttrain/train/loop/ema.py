"""The moving average of the weights (optim.ema_decay): what validation scores, best.pt keeps and the export holds.

The numbers are timm's ModelEmaV3 with `use_warmup=True` (what the run used before): every floating-point entry of
the model's state_dict (weights and persistent float buffers such as batch-norm running statistics) is lerped
toward the trained value with the warm-up decay; integer entries (`num_batches_tracked`) are the trained ones.
What differs is the cost: ModelEmaV3 built the model's and the copy's state_dicts and copied every integer buffer
on each optimizer step (resnet18: 0.6 ms of host time on a quiet CPU, over 1 ms on a busy one; 55 us now, besides
the lerp's own arithmetic: 2.8 ms a step for resnet18 on 2 cores, 1.4% of it, docs/benchmarks.md). Here the
tensor pairs are found once, each step is one multi-tensor lerp, and integer buffers are copied only when the
average is read (`module`, `state_dict()`). The checkpoint format is ModelEmaV3.state_dict()'s ("module."-prefixed
keys), read and written.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch

WARMUP_POWER = 2 / 3   # timm ModelEmaV3's warmup_power (warmup_gamma 1): decay 0.999 after ~31,600 steps


def warmup_decay(step: int, decay: float) -> float:
    """ModelEmaV3.get_decay(step) with use_warmup=True (no update_after_step, min_decay 0): 0 at the first
    optimizer step (the average starts as a copy), then 1 - (1 + n)^(-2/3) for n = step - 1, capped at `decay`,
    so a short run's average is not dominated by its random start."""
    n = max(0, step - 1)
    if n <= 0:
        return 0.0
    return max(min(1 - (1 + n / 1.0) ** -WARMUP_POWER, decay), 0.0)


Slot = tuple[dict[str, Any], dict[str, Any], str]   # (the copy's owner's tensors, the model's owner's, the name)


class WeightAverage:
    """An exponential moving average of `model`'s state, kept in a copy of the model in evaluation mode."""

    def __init__(self, model: torch.nn.Module, decay: float):
        self.decay = decay
        self._copy = copy.deepcopy(model).eval()
        holder = torch.nn.Module()   # the copy under "module": state_dict() keys as ModelEmaV3 wrote them
        holder.module = self._copy
        self._holder = holder
        # Parameters are held as objects: Module.to() moves their data in place. Buffers are looked up by name in
        # their owner at each use (a few dict reads), since Module.to() replaces them (bench speedups parks a
        # model on the host and back).
        self._averaged: list[torch.Tensor] = []      # the copy's floating-point parameters ...
        self._trained: list[torch.Tensor] = []       # ... and the model's they follow, in the same order
        self._float_buffers: list[Slot] = []
        self._counters: list[Slot] = []              # integer entries: the model's, copied when read
        trained = model.state_dict(keep_vars=True)
        seen: set[int] = set()
        for name, mine in self._copy.state_dict(keep_vars=True).items():
            if id(mine) in seen:
                continue  # a tied tensor is averaged once (ModelEmaV3 moved it once per name it has)
            seen.add(id(mine))
            if isinstance(mine, torch.nn.Parameter) and mine.is_floating_point():
                self._averaged.append(mine)
                self._trained.append(trained[name])
            else:
                (self._float_buffers if mine.is_floating_point() else self._counters).append(
                    _slot(self._copy, model, name, buffer=not isinstance(mine, torch.nn.Parameter)))

    @torch.no_grad()
    def update(self, step: int) -> None:
        """After optimizer step `step` (1-based): every averaged tensor moves 1 - decay of the way to the trained
        one, in one multi-tensor kernel (per device and dtype) and no host copies."""
        averaged = self._averaged + [mine[name] for mine, _, name in self._float_buffers]
        trained = self._trained + [theirs[name] for _, theirs, name in self._float_buffers]
        if averaged:
            # torch's multi-tensor lerp (a private name, as its optimizers and ModelEmaV3 use it): few launches
            torch._foreach_lerp_(averaged, trained, weight=1.0 - warmup_decay(step, self.decay))

    @property
    def module(self) -> torch.nn.Module:
        """The averaged model (evaluation mode), its integer buffers those of the model as trained."""
        self._copy_counters()
        return self._copy

    def state_dict(self) -> dict[str, Any]:
        """ModelEmaV3.state_dict()'s format: the averaged model's state under "module."."""
        self._copy_counters()
        return self._holder.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """A state written by state_dict() or by ModelEmaV3 (checkpoints of earlier runs), copied in place.
        Names or shapes that do not fit raise torch's RuntimeError."""
        self._holder.load_state_dict(state)

    def _copy_counters(self) -> None:
        with torch.no_grad():
            for mine, theirs, name in self._counters:
                mine[name].copy_(theirs[name])


def _slot(copy_root: torch.nn.Module, model: torch.nn.Module, name: str, *, buffer: bool) -> Slot:
    """Where state_dict entry `name` lives in the copy and in the model: its owners' buffer (or parameter) dicts,
    torch's own tables (Module._buffers, _parameters): one dict read per use, where getattr costs a search."""
    owner, _, leaf = name.rpartition(".")
    first, second = (root.get_submodule(owner) for root in (copy_root, model))
    if buffer:
        return first._buffers, second._buffers, leaf
    return first._parameters, second._parameters, leaf
