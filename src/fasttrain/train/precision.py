"""Autocast and GradScaler for the precision a Plan settled on.

The Plan decides the policy (fp16 on a CPU becomes fp32 there, with the reason); this module only
builds what a precision name means on a device. It honours whatever it is given, so tests and
benchmarks can force fp16 autocast with a GradScaler on the CPU (torch supports both there).
Imported only by the trainer, never by cli.py: it imports torch at the top.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import torch

_DTYPES = {"fp16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}


@dataclass
class Precision:
    """What one precision name means on one device: an autocast dtype (or none) and a GradScaler (or none)."""

    name: str                          # "fp32" | "fp16-mixed" | "bf16-mixed"
    device_type: str                   # "cuda" | "cpu"
    dtype: torch.dtype | None          # autocast dtype; None = plain fp32
    scaler: torch.amp.GradScaler | None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    @property
    def scale(self) -> float | None:
        """Current loss scale; reading it syncs a CUDA device, so call it only on logged steps."""
        return float(self.scaler.get_scale()) if self.scaler is not None else None


def make_precision(name: str, device: str | torch.device, *, init_scale: float = 2.0**16) -> Precision:
    """fp16 -> autocast fp16 + GradScaler (small gradients would underflow fp16 without it);
    bf16 -> autocast bf16, no scaler (bf16 has fp32's exponent range); fp32 -> neither."""
    device_type = torch.device(device).type
    if name == "fp32":
        return Precision(name, device_type, None, None)
    if name not in _DTYPES:
        raise ValueError(f"unknown precision {name!r}; expected fp32, fp16-mixed or bf16-mixed")
    scaler = torch.amp.GradScaler(device_type, init_scale=init_scale) if name == "fp16-mixed" else None
    return Precision(name, device_type, _DTYPES[name], scaler)
