"""Issue 39, item 2: the GPU test of findings 8 and 16 (tests/test_gpu_findings.py::test_no_sync_on_unlogged_steps)
turned torch's sync debug mode to "error" and then built the bench's baseline engine and moved a batch to the GPU:
both are blocking copies, so the check raised on every GPU and never looked at the steps it was written for.

Here the GPU test itself runs on the CPU, with the few CUDA-only calls replaced by recorders: the sync debug mode
is remembered as it is set, and building an engine, moving a module or a tensor to a device, or pinning memory
while it is "error" fails the test. The mode must also be back at 0 when the test ends, whatever happened."""
from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import test_gpu_findings
import torch


class _SyncMode:
    """torch.cuda.set_sync_debug_mode's stand-in: every mode set, in order."""

    def __init__(self) -> None:
        self.modes: list[Any] = []

    def __call__(self, mode: Any) -> None:
        self.modes.append(mode)

    @property
    def raising(self) -> bool:
        return bool(self.modes) and self.modes[-1] in ("error", 2)

    def setup_allowed(self, what: str) -> None:
        assert not self.raising, f"{what} while torch's sync debug mode is 'error' (a blocking copy raises there)"


@pytest.fixture
def sync_mode(monkeypatch: pytest.MonkeyPatch) -> _SyncMode:
    """The GPU test's CUDA calls made CPU ones, each set-up step checked against the recorded mode."""
    from fasttrain.train.loop.step import StepEngine

    mode = _SyncMode()
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", mode)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a, **k: (9, 0))
    real_module_to, real_build = torch.nn.Module.to, StepEngine.build

    def module_to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        mode.setup_allowed("a module moved to its device")
        return real_module_to(self, *args, **kwargs)

    def tensor_cuda(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        mode.setup_allowed("a tensor copied to the GPU")
        return self

    def pin(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        mode.setup_allowed("host memory pinned")
        return self

    def build(plan: Any, *args: Any, **kwargs: Any) -> Any:
        mode.setup_allowed("an engine built")
        return real_build(dataclasses.replace(plan, device="cpu", pin_memory=False), *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to", module_to)
    monkeypatch.setattr(torch.Tensor, "cuda", tensor_cuda)
    monkeypatch.setattr(torch.Tensor, "pin_memory", pin)
    monkeypatch.setattr(StepEngine, "build", staticmethod(build))
    return mode


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_the_sync_check_turns_on_after_the_set_up_and_off_after(sync_mode: _SyncMode, precision: str) -> None:
    test_gpu_findings.test_no_sync_on_unlogged_steps(precision)
    assert "error" in sync_mode.modes, sync_mode.modes  # the steps were checked at all
    assert not sync_mode.raising, sync_mode.modes       # and the mode is reset afterwards


def test_the_sync_check_is_reset_when_a_step_fails(sync_mode: _SyncMode, monkeypatch: pytest.MonkeyPatch) -> None:
    from fasttrain.train.loop.step import StepEngine

    checked = []
    real_step = StepEngine.step

    def step(self: StepEngine, *args: Any, **kwargs: Any) -> Any:
        if sync_mode.raising:
            checked.append(1)
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing (test)")
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(StepEngine, "step", step)
    with pytest.raises(RuntimeError, match="test"):
        test_gpu_findings.test_no_sync_on_unlogged_steps("fp32")
    assert checked and not sync_mode.raising, sync_mode.modes

