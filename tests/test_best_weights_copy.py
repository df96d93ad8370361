"""Issue 39, item 10: the best weights were kept with one blocking `.to("cpu", copy=True)` per tensor, on a GPU a
copy and a sync each (the pattern finding 15 removed from checkpoint saving). Checkpointer.new_best now takes its
host copy through integrity.to_host once (device copies started without waiting, one synchronize); host tensors
are cloned, since training goes on changing the model's own. On the CPU the copies are counted; the gpu test
(tests/test_gpu_engine.py) counts the syncs."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from fasttrain.train.loop import checkpointing as cp
from fasttrain.train.state import checkpoint_policy as policies
from fasttrain.train.state.integrity import to_host


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                               torch.nn.Linear(4 * 6 * 6, 3))


def _blocking_host_copies(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every `.to(...)`/`.cpu()` of a tensor to the host that waits for it (no non_blocking=True)."""
    seen: list[str] = []
    real_to, real_cpu = torch.Tensor.to, torch.Tensor.cpu

    def to(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        target = kwargs.get("device", args[0] if args else None)
        if str(target) == "cpu" and not kwargs.get("non_blocking", False):
            seen.append("to")
        return real_to(self, *args, **kwargs)

    def cpu(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        seen.append("cpu")
        return real_cpu(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "to", to)
    monkeypatch.setattr(torch.Tensor, "cpu", cpu)
    return seen


def test_new_best_copies_the_weights_through_to_host_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model()
    calls: list[int] = []

    def counted(value: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return to_host(value, **kwargs)

    monkeypatch.setattr(cp, "to_host", counted, raising=False)
    blocking = _blocking_host_copies(monkeypatch)
    keeper = cp.Checkpointer(policies.CheckpointPolicy(tmp_path), warn=lambda text: None)
    keeper.new_best(model, epoch=3, val_acc1=0.5)
    monkeypatch.undo()
    assert blocking == []  # was one blocking copy per tensor (9 here)
    assert calls == [1]
    assert keeper.best is not None and keeper.best["epoch"] == 3
    state = model.state_dict()
    assert list(keeper.best["model"]) == list(state)
    assert all(torch.equal(keeper.best["model"][k], v) for k, v in state.items())


def test_the_kept_best_does_not_move_with_training(tmp_path: Path) -> None:
    model = _model()
    keeper = cp.Checkpointer(policies.CheckpointPolicy(tmp_path), warn=lambda text: None)
    keeper.new_best(model, epoch=1, val_acc1=0.5)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # the optimizer's in-place update
        model[1].num_batches_tracked += 5
    kept = keeper.best["model"]
    assert all(torch.equal(kept[k], v) for k, v in before.items())
    assert all(kept[k].data_ptr() != v.data_ptr() for k, v in model.state_dict().items())


def test_to_host_copy_clones_host_tensors_and_keeps_the_rest() -> None:
    t = torch.ones(3)
    out = to_host({"a": [t, (t, 1)], "n": None}, copy=True)
    assert torch.equal(out["a"][0], t) and out["a"][0].data_ptr() != t.data_ptr()
    assert isinstance(out["a"][1], tuple) and out["a"][1][1] == 1 and out["n"] is None
    assert to_host({"a": t})["a"] is t  # without copy: host tensors are handed over as they are
