"""Models that fail on purpose, for the resilience tests (`--model fault_models:NAME`; tests/ is on sys.path).

Which training step fails is read from the environment when the model is built, so a CLI run can choose it:
FAULT_NAN_FROM=N / FAULT_NAN_AT=N (0-based training forward calls), FAULT_OOM_ABOVE=B (largest batch that fits).
"""
from __future__ import annotations

import os

import torch
from torch import nn


class _Linear(nn.Module):
    def __init__(self, num_classes: int, in_features: int = 3 * 16 * 16):
        super().__init__()
        self.fc = nn.Linear(in_features, num_classes)
        self.calls = 0  # training forward calls so far

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.fc(x.flatten(1))
        if self.training:
            out = self.fault(out, x)
            self.calls += 1
        return out

    def fault(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return out


class _NaN(_Linear):
    def __init__(self, num_classes: int):
        super().__init__(num_classes)
        self.start = int(os.environ.get("FAULT_NAN_FROM", "-1"))
        self.once = int(os.environ.get("FAULT_NAN_AT", "-1"))

    def fault(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        if self.calls == self.once or 0 <= self.start <= self.calls:
            return out * float("nan")
        return out


class _OOM(_Linear):
    def __init__(self, num_classes: int):
        super().__init__(num_classes)
        self.limit = int(os.environ.get("FAULT_OOM_ABOVE", "1000000"))
        self.batches: list[int] = []

    def fault(self, out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        self.batches.append(int(x.shape[0]))
        if x.shape[0] > self.limit:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory (test model: batch {x.shape[0]} > {self.limit})")
        return out


def nan_net(num_classes: int = 3) -> nn.Module:
    torch.manual_seed(0)
    return _NaN(num_classes)


def oom_net(num_classes: int = 3) -> nn.Module:
    torch.manual_seed(0)
    return _OOM(num_classes)


def other_net(num_classes: int = 3) -> nn.Module:
    """Not the architecture of tiny_cnn: resuming a tiny_cnn checkpoint into it must be refused."""
    return nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, num_classes))
