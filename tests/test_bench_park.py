"""bench/park.py (issue 24, finding 14): a parked configuration's tensors leave the device and come back unchanged,
the optimizer still holding the same Parameter objects and its state on the devices it was on. Run with the
moves to the device pretended: a Parking built for a CUDA device is given CPU tensors."""
from __future__ import annotations

import pytest
import torch

from fasttrain.bench.park import Parking


def test_park_and_unpark_round_trip(monkeypatch: pytest.MonkeyPatch) -> None:
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.Adam(model.parameters(), foreach=True)
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    params = list(model.parameters())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    moved: list[str] = []
    real_to = torch.Tensor.to

    def to(t, *a, **k):
        moved.append(str(a[0]) if a else "")
        return t if a and "cuda" in str(a[0]) else real_to(t, *a, **k)

    monkeypatch.setattr(torch.Tensor, "to", to)
    monkeypatch.setattr("fasttrain.train.loop.oom.free_device_memory", lambda device: None)
    parking = Parking(torch.device("cuda"))  # the device it parks from; CPU tensors stand in for its memory
    monkeypatch.setattr(torch.nn.Module, "to", lambda m, device: m)
    box = {"images": torch.ones(2, 4)}
    parking.park(model, optimizer, box)
    assert parking.parked and moved == ["cpu"] * 7  # step, exp_avg, exp_avg_sq of 2 parameters, and the inputs
    parking.unpark(model, box)
    assert not parking.parked and list(model.parameters()) == params
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(s["step"].device.type == "cpu" for s in optimizer.state.values())  # foreach Adam keeps it there
    assert moved[7:] == ["cpu"] * 6 + ["cuda"]  # back: the state to the device each tensor was on, the inputs


def test_nothing_moves_off_cuda() -> None:
    parking = Parking(torch.device("cpu"))
    parking.park(torch.nn.Linear(2, 2), torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.1), {})
    assert not parking.parked
