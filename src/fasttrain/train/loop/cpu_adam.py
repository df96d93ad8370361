"""Adam/AdamW whose fused CPU step does not copy channels_last weights.

Why: torch's fused CPU kernel (`torch._fused_adamw_`) works on contiguous memory. A conv weight in channels_last
(the `cpu` preset's layout) is dense but not contiguous in torch's default sense, so the kernel copies each such
weight, gradient and both moment buffers to contiguous memory and back, every step. For resnet18 on this
project's 2-core CPU that is ~7 of the step's ~65 ms (torch.profiler: the optimizer step 12.3 ms with the copies,
5.8 ms without; batch 64, 32 px, bf16 autocast). A channels_last tensor of shape (O, I, H, W) is the contiguous
tensor `t.permute(0, 2, 3, 1)` under another name: the same elements in the same memory. The step here hands the
kernel those views, so it updates the same memory with the same arithmetic and no copies (the results are
bit-identical to torch.optim.AdamW(fused=True); tests/test_cpu_adam.py checks it).

Everything else is torch's: the class is torch.optim.Adam/AdamW (param groups, state_dict, checkpoints and
resume are unchanged; a checkpoint written by either loads into the other), and `step` does what Adam.step does
for fused=True on one device, amsgrad and maximize off. A tensor whose layout does not match its gradient's or
its moments' (a state loaded from elsewhere) is handed over as it is: torch's kernel then copies, as before.
"""
from __future__ import annotations

from typing import Any, Callable

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
    """Mixin: Adam's fused step on dense views. Only for fused=True, amsgrad and maximize off, one device."""

    param_groups: list[dict[str, Any]]
    state: dict[torch.Tensor, dict[str, Any]]

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        """As Adam.step: a GradScaler (fp16's, or the non-finite guard's at scale 1) hands its scale and its
        found-inf flag as the attributes `grad_scale` and `found_inf`; the fused kernel unscales the gradients
        and leaves the weights alone where found_inf is set."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grad_scale, found_inf = getattr(self, "grad_scale", None), getattr(self, "found_inf", None)
        for group in self.param_groups:
            self._step_group(group, grad_scale, found_inf)
        return loss

    def _step_group(self, group: dict[str, Any], grad_scale: torch.Tensor | None,
                    found_inf: torch.Tensor | None) -> None:
        if group.get("amsgrad") or group.get("maximize"):
            raise ValueError("the copy-free Adam step does not do amsgrad or maximize: use torch.optim.Adam")
        lists: tuple[list[torch.Tensor], ...] = ([], [], [], [])  # params, grads, first and second moments
        steps: list[torch.Tensor] = []
        for param in group["params"]:
            if param.grad is None:
                continue
            if param.grad.is_sparse:
                raise RuntimeError("Adam does not support sparse gradients")
            state = self.state[param]
            if not state:  # as torch's Adam initialises it for fused=True
                state["step"] = torch.zeros((), dtype=torch.float32, device=param.device)
                state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            views = dense_views([param, param.grad, state["exp_avg"], state["exp_avg_sq"]])
            for bucket, view in zip(lists, views):
                bucket.append(view)
            steps.append(state["step"])
        if not steps:
            return
        # The ops torch's own Adam runs for fused=True (torch/optim/adam.py, _fused_adam): private names, but the
        # same calls, so the arithmetic is torch's; the only difference is the views handed to them.
        torch._foreach_add_(steps, 1)
        kernel = torch._fused_adamw_ if group.get("decoupled_weight_decay", False) else torch._fused_adam_
        beta1, beta2 = group["betas"]
        kernel(*lists, [], steps, lr=float(group["lr"]), beta1=float(beta1), beta2=float(beta2),
               weight_decay=group["weight_decay"], eps=group["eps"], amsgrad=False, maximize=False,
               grad_scale=grad_scale, found_inf=found_inf)
        if found_inf is not None:  # an fp16 step the scaler skips does not count (as torch's fused Adam)
            torch._foreach_sub_(steps, [found_inf] * len(steps))


class DenseAdamW(_DenseStep, torch.optim.AdamW):
    """torch.optim.AdamW(fused=True) without the channels_last copies on the CPU."""


class DenseAdam(_DenseStep, torch.optim.Adam):
    """torch.optim.Adam(fused=True) without the channels_last copies on the CPU."""
