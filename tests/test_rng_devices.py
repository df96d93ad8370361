"""Issue 24, finding 3: a checkpoint written where more GPUs were visible resumes where fewer are (a Kaggle 2xT4
run resumed on one T4). Before, the checkpoint kept every visible GPU's RNG state and restored them with
set_rng_state_all: an IndexError for the devices that are not there. torch.cuda's RNG functions are faked with
the allocator's own behaviour (a device index past the visible count raises IndexError), so the CPU runs it."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fasttrain.train.state import checkpoint as ck
from fasttrain.train.state import rng


class FakeCuda:
    """`visible` GPUs, each with its own RNG state; an index past them fails as torch's default_generators does."""

    def __init__(self, visible: int, current: int = 0):
        self.visible, self.current = visible, current
        self.states = {i: torch.full((8,), i, dtype=torch.uint8) for i in range(visible)}

    def get_rng_state(self, device: int | str = "cuda") -> torch.Tensor:
        return self.states[self._index(device)].clone()

    def set_rng_state(self, state: torch.Tensor, device: int | str = "cuda") -> None:
        index = self._index(device)
        if index >= self.visible:
            raise IndexError("tuple index out of range")  # torch.cuda.default_generators[idx]
        self.states[index] = state.clone()

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [self.states[i].clone() for i in range(self.visible)]

    def _index(self, device: int | str) -> int:
        return device if isinstance(device, int) else self.current

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: self.visible)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.current)
        for module in (torch.cuda, torch.cuda.random):  # set_rng_state_all calls the module's own name
            monkeypatch.setattr(module, "get_rng_state", self.get_rng_state)
            monkeypatch.setattr(module, "set_rng_state", self.set_rng_state)
            monkeypatch.setattr(module, "get_rng_state_all", self.get_rng_state_all)


def test_resume_on_fewer_gpus_restores_the_trainers_own_device(monkeypatch: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    two = FakeCuda(visible=2, current=1)  # rank 1 of a 2-GPU run writes its state
    two.install(monkeypatch)
    two.states[1] = torch.full((8,), 42, dtype=torch.uint8)
    saved = rng.rng_states()
    path = ck.save_atomic({"rng": saved}, tmp_path / "rng.pt")

    one = FakeCuda(visible=1, current=0)  # the run resumed on one GPU
    one.install(monkeypatch)
    rng.restore_rng_states(ck.load(path)["rng"])
    assert torch.equal(one.states[0], torch.full((8,), 42, dtype=torch.uint8))


def test_an_older_checkpoint_with_every_gpus_state_resumes_on_one(monkeypatch: pytest.MonkeyPatch) -> None:
    one = FakeCuda(visible=1, current=0)
    one.install(monkeypatch)
    older = {**rng.rng_states(), "cuda": [torch.full((8,), 7, dtype=torch.uint8),
                                         torch.full((8,), 9, dtype=torch.uint8)]}
    older.pop("cuda_device")
    rng.restore_rng_states(older)  # raised IndexError: set_rng_state_all over two states, one device
    assert torch.equal(one.states[0], torch.full((8,), 7, dtype=torch.uint8))


def test_own_cuda_state_picks_the_saving_device() -> None:
    states = [torch.zeros(2, dtype=torch.uint8), torch.ones(2, dtype=torch.uint8)]
    assert torch.equal(rng.own_cuda_state(states, None, 1), states[1])
    assert torch.equal(rng.own_cuda_state(states, None, 5), states[0])
    assert torch.equal(rng.own_cuda_state(states[1], 1, 0), states[1])
    assert rng.own_cuda_state([], None, 0) is None
