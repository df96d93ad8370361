"""A failed torch.compile frees what it held before the eager step runs (issue 25, point 14): on a CPU a run of
resnet50 on 24 GB was killed by the kernel's OOM killer right after `torch.compile failed ... CppCompileError`,
the eager retry running while the failed attempt's frames (its activations) were still alive."""
from __future__ import annotations

import weakref

import torch

from fasttrain.models.setup import CompileGuard


class Probe(torch.nn.Module):
    """Eager forward that records whether the failed attempt's tensor is still alive when it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
        self.alive_during_eager: list[bool] = []
        self.ref: weakref.ref | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.alive_during_eager.append(self.ref is not None and self.ref() is not None)
        return self.linear(x)


def test_the_failed_attempt_is_freed_before_the_eager_forward() -> None:
    model = Probe()
    warned: list[str] = []
    guard = CompileGuard(model, "default", warned.append)

    def failing_compiled(x: torch.Tensor) -> torch.Tensor:
        activations = torch.ones(1024, 1024)  # what an aborted compiled forward holds in its frames
        model.ref = weakref.ref(activations)
        raise RuntimeError("CppCompileError: C++ compile error")

    guard.compiled = failing_compiled
    out = guard(torch.zeros(3, 4))
    assert out.shape == (3, 2)
    assert model.alive_during_eager == [False]
    assert warned and "CppCompileError" in warned[0] and not guard.active
