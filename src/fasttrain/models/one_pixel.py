"""Convolutions whose output is a single pixel, run as the matrix product they are (CPU).

An ImageNet network trained on small images ends on tiny feature maps: resnet18 at 32 px reaches its last stage
(layer4) with 2x2 maps and leaves it with 1x1. A 3x3 convolution with padding 1 on a 1x1 map has one output
pixel, and of its nine taps only the centre one ever meets real input; the other eight multiply padding zeros.
oneDNN computes them all, and its backward pass for such a layer is slow: profiled on this project's 2-core
CPU (resnet18 at 32 px, batch 64, bf16), layer4's backward took 17.6 ms of a ~65 ms step against 2.1 ms for its
forward.

When a convolution's output is 1x1, it is exactly a dot product of the taps that fall on real input with that
input: `F.linear` over the flattened input and the matching taps of the kernel. The weights stay where they
were (the taps are read from the same parameter: the same state_dict and checkpoints; the taps that only ever
see padding get a gradient of zero, as they do in the convolution, laid out as the weight is), and the result
is the same sums in another order. Measured (benchmarks/one_pixel.py; docs/benchmarks.md, "One-pixel convolutions"):
resnet18 at 32 px,
batch 64, channels_last, fused AdamW, 65.0 -> 45.5 ms a step in bf16 (1.43x), 1.33x in fp32; outputs identical.

Applied on the CPU only (`prepare_model`), where it was measured; grouped convolutions (depthwise) keep their
own path (not measured). A convolution whose output is larger than one pixel runs as before, so the same module
serves any input size.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def one_pixel_taps(in_hw: tuple[int, ...], kernel: tuple[int, ...], stride: tuple[int, ...],
                   padding: tuple[int, ...], dilation: tuple[int, ...]) -> tuple[tuple[int, int], ...] | None:
    """For a zero-padded convolution of an input of `in_hw` pixels: ((first tap row, end), (first tap column,
    end)) of the kernel taps that meet real input, when the output is one pixel; None when it is larger, the
    convolution is dilated, or no tap meets real input. Pure.

    The one output pixel reads input rows -padding .. kernel - padding - 1, so tap t meets row t - padding,
    real when 0 <= t - padding < height: taps padding .. min(kernel, padding + height)."""
    if dilation != (1, 1):
        return None
    spans = []
    for size, k, s, p in zip(in_hw, kernel, stride, padding, strict=True):
        if (size + 2 * p - k) // s + 1 != 1:
            return None
        first, end = p, min(k, p + size)
        if end <= first:
            return None
        spans.append((first, end))
    return tuple(spans)


class OnePixelConv2d(nn.Conv2d):
    """nn.Conv2d that computes a one-pixel output as `F.linear` (see the module docstring); the same parameters,
    so a model converted in place (to_one_pixel) loads and saves as before."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        taps = None
        # padding "same"/"valid" (nn.Conv2d keeps the string) is left to the convolution, as to_one_pixel does
        if self.padding_mode == "zeros" and self.groups == 1 and isinstance(self.padding, tuple):
            taps = one_pixel_taps(tuple(input.shape[-2:]), self.kernel_size, self.stride, self.padding, self.dilation)
        if taps is None:
            return super().forward(input)
        (r0, r1), (c0, c1) = taps
        # input rows 0 .. r1 - r0 meet kernel rows r0 .. r1 (likewise columns); flattened in the same (C, H, W) order
        pixels = input[:, :, :r1 - r0, :c1 - c0].reshape(input.shape[0], -1)
        kernel = KernelTaps.apply(self.weight, r0, r1, c0, c1).reshape(self.out_channels, -1)
        return F.linear(pixels, kernel, self.bias).view(input.shape[0], self.out_channels, 1, 1)


class KernelTaps(torch.autograd.Function):
    """`weight[:, :, r0:r1, c0:c1]` (a copy: the taps the one pixel reads) whose gradient comes back laid out as
    the weight is. Plain slicing's backward builds a zeroed contiguous tensor, which the gradient accumulator then
    copies again into a channels_last weight's layout: profiled in the real loop (resnet18 at 32 px), the two
    cost ~13 ms of a ~45 ms step."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, weight: torch.Tensor, r0: int, r1: int, c0: int,
                c1: int) -> torch.Tensor:
        ctx.taps = (r0, r1, c0, c1)  # type: ignore[attr-defined]  # FunctionCtx: set what backward needs
        ctx.layout = (weight.shape, weight.stride(), weight.dtype, weight.device)  # type: ignore[attr-defined]  # as above
        return weight[:, :, r0:r1, c0:c1].contiguous()

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx,
                 grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None, None]:
        r0, r1, c0, c1 = ctx.taps  # type: ignore[attr-defined]  # set by forward
        shape, stride, dtype, device = ctx.layout  # type: ignore[attr-defined]  # set by forward
        full = torch.empty_strided(shape, stride, dtype=dtype, device=device).zero_()
        full[:, :, r0:r1, c0:c1] = grad
        return full, None, None, None, None


def to_one_pixel(model: nn.Module) -> int:
    """Turn every plain nn.Conv2d of `model` (not a subclass: timm's same-padding and other variants compute
    something else) into an OnePixelConv2d in place -> how many were turned. Ungrouped ones with a kernel larger
    than 1x1 only: grouped ones never take the matrix path, and a 1x1 kernel has no padding taps to skip (its
    one-pixel outputs, resnet50's bottlenecks on 1x1 maps, were not measured), and with numbers for padding, not
    "same" or "valid" (kept as the string, which the taps' arithmetic cannot use)."""
    turned = 0
    for module in model.modules():
        if (type(module) is nn.Conv2d and module.groups == 1 and module.kernel_size != (1, 1)
                and isinstance(module.padding, tuple)):
            module.__class__ = OnePixelConv2d
            turned += 1
    return turned


def to_plain(model: nn.Module) -> int:
    """Undo to_one_pixel in place: every OnePixelConv2d of `model` back to nn.Conv2d (the same parameters) -> how
    many. A model handed to the Python API is the user's own object; it goes back to them with their classes."""
    restored = 0
    for module in model.modules():
        if type(module) is OnePixelConv2d:
            module.__class__ = nn.Conv2d  # type: ignore[assignment]  # the class swap is the point: same parameters
            restored += 1
    return restored
