"""Issue 24, finding 15: checkpoint hashing copied each tensor to the host on its own (on a GPU, a copy and a sync
per tensor) and torch.save then copied everything again. save_atomic now moves the payload to the host once
(to_host: device copies started without waiting, one synchronize) and hashes and saves that. On the CPU the
copies are counted; the gpu test counts the syncs."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fasttrain.train.state import checkpoint as ck
from fasttrain.train.state import rng
from fasttrain.train.state.integrity import to_host


def test_saving_hashes_host_tensors_without_copying_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
    copies: list[int] = []
    real_cpu = torch.Tensor.cpu
    monkeypatch.setattr(torch.Tensor, "cpu", lambda t, *a, **k: copies.append(1) or real_cpu(t, *a, **k))
    ck.save_atomic({"model": model.state_dict(), "rng": rng.rng_states()}, tmp_path / "c.pt")
    assert copies == []  # was one .cpu() per tensor while hashing
    monkeypatch.undo()
    loaded = ck.load(tmp_path / "c.pt")
    assert loaded["checksum_note"] is None
    assert all(torch.equal(loaded["model"][k], v) for k, v in model.state_dict().items())


def test_to_host_keeps_structure_and_host_tensors() -> None:
    t = torch.ones(3)
    payload = {"a": [t, (t, 1)], "b": {"c": "x"}, "n": None}
    out = to_host(payload)
    assert out["a"][0] is t and out["a"][1][0] is t and out["b"] == {"c": "x"} and isinstance(out["a"][1], tuple)
