"""`bench speedups` keeps one configuration on the GPU at a time: the others wait in host memory.

Every configuration (a model, its gradients, its optimizer state, its inputs) stays built for the whole bench, so
rounds can interleave them; on an 8 GB laptop 4060 or a 16 GB T4 eight of them at once do not fit, and the later
ones failed with out-of-memory. A configuration is parked (moved to the host) after it has warmed up or been
timed, and brought back before its next turn, outside the timed steps; its first step back is untimed too
(run_steps' caller warms it), since the allocator and a CUDA graph see new addresses. The Parameter objects stay
the same (Module.to moves their data in place), so the optimizer still holds them; its state goes back to the
device each tensor came from (a foreach Adam keeps its step counts on the host).
"""
from __future__ import annotations

from typing import Any

import torch


def _state_tensors(optimizer: torch.optim.Optimizer) -> list[tuple[dict[Any, Any], Any, torch.Tensor]]:
    return [(state, key, value) for state in optimizer.state.values() for key, value in state.items()
            if torch.is_tensor(value)]


class Parking:
    """Moves one configuration's tensors between its device and the host; a no-op off CUDA."""

    def __init__(self, device: torch.device):
        self.device = device
        self.parked = False
        self._homes: list[tuple[dict[Any, Any], Any, torch.device]] = []

    def park(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, tensors: dict[str, Any]) -> None:
        """To the host: the module (parameters, gradients, buffers), the optimizer state, `tensors` (in place)."""
        if self.parked or self.device.type != "cuda":
            return
        module.to("cpu")
        self._homes = []
        for state, key, value in _state_tensors(optimizer):
            self._homes.append((state, key, value.device))
            state[key] = value.to("cpu")
        for name, value in tensors.items():
            tensors[name] = value.to("cpu")
        self.parked = True
        from fasttrain.train.loop.oom import free_device_memory
        free_device_memory(self.device)  # hand the cached blocks back: the next configuration needs them

    def unpark(self, module: torch.nn.Module, tensors: dict[str, Any]) -> None:
        """Back to the device, each optimizer state tensor to the device it came from."""
        if not self.parked:
            return
        module.to(self.device)
        for state, key, home in self._homes:
            state[key] = state[key].to(home)
        for name, value in tensors.items():
            tensors[name] = value.to(self.device, non_blocking=True)
        self._homes = []
        self.parked = False
