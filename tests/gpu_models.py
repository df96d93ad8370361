"""Models for the CUDA tests, loaded by `fasttrain train --model gpu_models:NAME` (module:callable).

`probe_cnn` is a small CNN that notes, on its first forward in each mode, what the training loop really set up
around it: the device and memory format of its input, the dtype autocast gives a convolution, whether autocast
is on, and the backend flags (cudnn.benchmark, TF32). The tests read SEEN after an in-process run, so they check
the facts on the device instead of trusting the plan's words.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn

SEEN: list[dict[str, Any]] = []


def _autocast_dtype() -> str | None:
    """The dtype CUDA autocast casts to right now, or None when autocast is off."""
    try:
        on = torch.is_autocast_enabled("cuda")
    except TypeError:  # older torch: no device argument
        on = torch.is_autocast_enabled()
    if not on:
        return None
    getter = getattr(torch, "get_autocast_dtype", None)
    return str(getter("cuda")) if getter is not None else str(torch.get_autocast_gpu_dtype())


class ProbeCNN(nn.Module):
    def __init__(self, num_classes: int = 3, width: int = 16):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width * 2, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width * 2)
        self.head = nn.Linear(width * 2, num_classes)
        self._noted: set[bool] = set()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv1(x)
        if self.training not in self._noted:  # once per mode: no per-step host work
            self._noted.add(self.training)
            SEEN.append({
                "training": self.training,
                "input_device": x.device.type,
                "input_channels_last": x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last),
                "conv_dtype": str(y.dtype),
                "autocast_dtype": _autocast_dtype(),
                "cudnn_benchmark": torch.backends.cudnn.benchmark,
                "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
                "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
                "float32_matmul_precision": torch.get_float32_matmul_precision(),
                "weight_device": self.conv1.weight.device.type,
                "weight_dtype": str(self.conv1.weight.dtype),
            })
        y = torch.relu(self.bn1(y))
        y = nn.functional.max_pool2d(y, 2)
        y = torch.relu(self.bn2(self.conv2(y)))
        y = nn.functional.adaptive_avg_pool2d(y, 1).flatten(1)
        return self.head(y)


def probe_cnn(num_classes: int = 3) -> nn.Module:
    return ProbeCNN(num_classes)
