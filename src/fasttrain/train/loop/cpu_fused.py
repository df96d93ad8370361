"""Fused CPU optimizer steps (Adam, AdamW, SGD) that do not copy channels_last weights.

Why: torch's fused CPU kernels (`torch._fused_adamw_`, `torch._fused_sgd_`) work on contiguous memory. A conv
weight in channels_last (the `cpu` preset's layout) is dense but not contiguous in torch's default sense, so the
kernel copies each such weight, its gradient and its optimizer state to contiguous memory and back, every step.
For resnet18 on this project's 2-core CPU that is ~7 of AdamW's step's ~65 ms (torch.profiler: the optimizer step
12.3 ms with the copies, 5.8 ms without; batch 64, 32 px, bf16 autocast); SGD with momentum 7.9 ms against 3.8.
A channels_last tensor of shape (O, I, H, W) is the contiguous tensor `t.permute(0, 2, 3, 1)` under another name:
the same elements in the same memory. The steps here hand the kernels those views, so they update the same memory
with the same arithmetic and no copies (bit-identical to torch's fused classes; tests/test_cpu_fused.py checks it).

Everything else is torch's: the classes are torch.optim.Adam/AdamW/SGD (param groups, state_dict, checkpoints and
resume are unchanged; a checkpoint written by either loads into the other), and `step` makes the calls torch's
own step makes for fused=True. Anything these steps do not cover (amsgrad, maximize, a tensor on another device,
SGD momentum buffers only some parameters have) goes to torch's own step. A tensor whose layout does not match
its gradient's or its state's (a state loaded from elsewhere) is handed over as it is: the kernel then copies.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any, overload

import torch

CHANNELS_LAST_ORDER = (0, 2, 3, 1)  # (O, I, H, W) in channels_last memory is a contiguous (O, H, W, I)


def dense_views(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """Views of one parameter's tensors (weight, gradient, moments) that one elementwise kernel can update in
    place without copies: the contiguous (O, H, W, I) views where all are 4-d channels_last with the same strides;
    otherwise the tensors as they are (contiguous ones need no copy; mixed layouts must keep their own shapes)."""
    first = tensors[0]
    if first.is_contiguous() or first.dim() != 4 or len({t.stride() for t in tensors}) != 1 \
            or not first.is_contiguous(memory_format=torch.channels_last):
        return tensors
    return [t.permute(*CHANNELS_LAST_ORDER) for t in tensors]


def wants_dense_step(params: list[torch.Tensor], *, fused: bool) -> bool:
    """The copy-free step only matters for the fused kernel on the CPU with channels_last weights."""
    return fused and any(p.device.type == "cpu" and p.dim() == 4 and not p.is_contiguous() for p in params)


class _DenseStep:
    """Mixin over a torch optimizer: `step` runs `_step_group` on every param group when `covers` says the
    copy-free step handles all of them, else torch's own step. A GradScaler (fp16's, or the non-finite guard's at
    scale 1) hands a fused optimizer its scale and found-inf flag as the attributes `grad_scale` and `found_inf`
    (as torch's steps read them): the kernel unscales the gradients and leaves the weights alone where found_inf
    is set."""

    param_groups: list[dict[str, Any]]
    state: defaultdict[torch.Tensor, Any]

    # The overloads of torch.optim.Optimizer.step, which this step stands in for (a closure's loss is a float there)
    @overload
    def step(self, closure: None = None) -> None: ...

    @overload
    def step(self, closure: Callable[[], float]) -> float: ...

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        if not all(self.covers(group) for group in self.param_groups):
            return super().step(closure)  # type: ignore[misc]  # a mixin: torch's optimizer is next in the MRO
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grad_scale, found_inf = getattr(self, "grad_scale", None), getattr(self, "found_inf", None)
        for group in self.param_groups:
            self._step_group(group, grad_scale, found_inf)
        return loss

    def covers(self, group: dict[str, Any]) -> bool:
        """Every tensor on the CPU and no sparse gradient; the optimizers add their own conditions."""
        return not group.get("maximize") and not group.get("differentiable") and all(
            p.device.type == "cpu" and not (p.grad is not None and p.grad.is_sparse) for p in group["params"])

    def _step_group(self, group: dict[str, Any], grad_scale: torch.Tensor | None,
                    found_inf: torch.Tensor | None) -> None:
        raise NotImplementedError


def _add_views(lists: tuple[list[torch.Tensor], ...], tensors: list[torch.Tensor]) -> None:
    """One parameter's tensors (dense_views of them) appended to the kernel's per-kind lists."""
    # strict=False: SGD without momentum hands 2 tensors to its 3 lists (its momentum-buffer list stays empty)
    for bucket, view in zip(lists, dense_views(tensors), strict=False):
        bucket.append(view)


class _DenseAdamStep(_DenseStep):
    """Mixin over torch.optim.Adam/AdamW: the fused step on dense views (fused=True, one CPU device)."""

    def covers(self, group: dict[str, Any]) -> bool:
        return super().covers(group) and not group.get("amsgrad") and not group.get("capturable")

    def _step_group(self, group: dict[str, Any], grad_scale: torch.Tensor | None,
                    found_inf: torch.Tensor | None) -> None:
        lists: tuple[list[torch.Tensor], ...] = ([], [], [], [])  # params, grads, first and second moments
        steps: list[torch.Tensor] = []
        for param in group["params"]:
            if param.grad is None:
                continue
            state = self.state[param]
            if not state:  # as torch's Adam initialises it for fused=True
                state["step"] = torch.zeros((), dtype=torch.float32, device=param.device)
                state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            _add_views(lists, [param, param.grad, state["exp_avg"], state["exp_avg_sq"]])
            steps.append(state["step"])
        if not steps:
            return
        # The ops torch's own Adam runs for fused=True (torch/optim/adam.py, _fused_adam): private names, but the
        # same calls, so the arithmetic is torch's; the only difference is the views handed to them.
        torch._foreach_add_(steps, 1)
        kernel = torch._fused_adamw_ if group.get("decoupled_weight_decay", False) else torch._fused_adam_
        beta1, beta2 = group["betas"]
        params, grads, exp_avgs, exp_avg_sqs = lists
        kernel(
            params,
            grads,
            exp_avgs,
            exp_avg_sqs,
            [],
            steps,
            lr=float(group["lr"]),
            beta1=float(beta1),
            beta2=float(beta2),
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            amsgrad=False,
            maximize=False,
            grad_scale=grad_scale,
            found_inf=found_inf,
        )
        if found_inf is not None:  # a step the scaler skips does not count (as torch's fused Adam)
            torch._foreach_sub_(steps, [found_inf] * len(steps))


class DenseAdamW(_DenseAdamStep, torch.optim.AdamW):
    """torch.optim.AdamW(fused=True) without the channels_last copies on the CPU."""


class DenseAdam(_DenseAdamStep, torch.optim.Adam):
    """torch.optim.Adam(fused=True) without the channels_last copies on the CPU."""


class DenseSGD(_DenseStep, torch.optim.SGD):
    """torch.optim.SGD(fused=True) without the channels_last copies on the CPU."""

    def covers(self, group: dict[str, Any]) -> bool:
        """Also: every parameter with a gradient has a momentum buffer, or none has (torch's first step)."""
        if not super().covers(group):
            return False
        if group["momentum"] == 0:
            return True
        return (
            len({self.state[p].get("momentum_buffer") is not None for p in group["params"] if p.grad is not None}) <= 1
        )

    def _step_group(
        self, group: dict[str, Any], grad_scale: torch.Tensor | None, found_inf: torch.Tensor | None
    ) -> None:
        params = [p for p in group["params"] if p.grad is not None]
        if not params:
            return
        momentum = group["momentum"]
        grads: list[torch.Tensor] = [p.grad for p in params]
        stored = [self.state[p].get("momentum_buffer") for p in params] if momentum != 0 else []
        first = momentum != 0 and all(b is None for b in stored)
        # covers(): every parameter has a buffer, or none has; then, as torch's _fused_sgd, the kernel fills them
        # from the gradients
        buffers = [torch.empty_like(g) for g in grads] if first else stored
        lists: tuple[list[torch.Tensor], ...] = ([], [], [])  # params, grads, momentum buffers
        for k, (param, grad) in enumerate(zip(params, grads, strict=True)):
            _add_views(lists, [param, grad, *([buffers[k]] if momentum != 0 else [])])
        # torch/optim/sgd.py's _fused_sgd makes this call (see the Adam step above for why the private name).
        torch._fused_sgd_(
            lists[0],
            lists[1],
            lists[2],
            weight_decay=group["weight_decay"],
            momentum=momentum,
            lr=float(group["lr"]),
            dampening=group["dampening"],
            nesterov=group["nesterov"],
            maximize=False,
            is_first_step=first,
            grad_scale=grad_scale,
            found_inf=found_inf,
        )
        if momentum != 0:
            for param, buffer in zip(params, buffers, strict=True):
                self.state[param]["momentum_buffer"] = buffer
