"""checkpoint.py: atomic writes, what a checkpoint holds, and clear errors for bad files."""
from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from loop_helpers import tiny_mlp

from fasttrain.core.errors import UserError
from fasttrain.train.state import checkpoint as ck
from fasttrain.train.state import checkpoint_policy as policies
from fasttrain.train.state import rng


def _payload(model: torch.nn.Module) -> dict:
    return {"model": model.state_dict(), "epoch": 3, "rng": rng.rng_states()}


def test_round_trip_restores_weights_and_versions(tmp_path: Path) -> None:
    src = tiny_mlp(seed=1)
    path = ck.save_atomic(_payload(src), tmp_path / "run" / "last.pt")
    payload = ck.load(path)
    assert payload["epoch"] == 3 and payload["versions"]["torch"] == torch.__version__
    dst = tiny_mlp(seed=2)
    ck.load_model_state(dst, payload["model"], path)
    for a, b in zip(src.state_dict().values(), dst.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    assert [p.name for p in path.parent.iterdir()] == ["last.pt"], "a temporary file was left behind"


def test_rng_states_come_back(tmp_path: Path) -> None:
    torch.manual_seed(5)
    path = ck.save_atomic({"rng": rng.rng_states()}, tmp_path / "c.pt")
    expected = torch.rand(3)
    rng.restore_rng_states(ck.load(path)["rng"])
    assert torch.equal(torch.rand(3), expected)


def test_failed_save_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    path = ck.save_atomic(_payload(tiny_mlp()), tmp_path / "last.pt")
    before = path.read_bytes()
    with pytest.raises((AttributeError, pickle.PicklingError)):  # a local lambda; which one depends on pickle
        ck.save_atomic({"model": lambda: None}, path)  # a lambda cannot be pickled: torch.save fails midway
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]


def test_truncated_file_is_a_user_error_naming_it_and_the_previous_one(tmp_path: Path) -> None:
    good = ck.save_atomic(_payload(tiny_mlp()), tmp_path / "epoch_0001.pt")
    bad = tmp_path / "last.pt"
    bad.write_bytes(good.read_bytes()[:200])
    with pytest.raises(UserError) as err:
        ck.load(bad)
    text = str(err.value)
    assert str(bad) in text and "truncated" in text and "epoch_0001.pt" in text


def test_foreign_file_and_missing_file(tmp_path: Path) -> None:
    foreign = tmp_path / "other.pt"
    torch.save({"state": 1}, foreign)
    with pytest.raises(UserError, match="not a fasttrain checkpoint"):
        ck.load(foreign)
    with pytest.raises(UserError, match="no such checkpoint"):
        ck.load(tmp_path / "nope.pt")


def test_shape_mismatch_names_the_file_and_the_tensor(tmp_path: Path) -> None:
    path = ck.save_atomic(_payload(tiny_mlp(classes=3)), tmp_path / "best.pt")
    with pytest.raises(UserError) as err:
        ck.load_model_state(tiny_mlp(classes=5), ck.load(path)["model"], path)
    assert str(path) in str(err.value) and "3.weight" in str(err.value)


def test_policy_writes_last_the_model_files_and_every_n(tmp_path: Path) -> None:
    policy = policies.CheckpointPolicy(tmp_path, every_epochs=2)
    model = tiny_mlp()
    payload = _payload(model)
    policy.save_last(payload)
    policy.save_model(policies.weights_payload(model.state_dict(), epoch=1, val_acc1=0.5))
    assert policy.save_numbered(payload, epoch=0) is None and not policy.numbered_due(0)
    assert policy.numbered_due(1) and policy.save_numbered(payload, epoch=1) == tmp_path / "epoch_0002.pt"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch_0002.pt", "last.pt", "model.safetensors"]


def test_an_earlier_best_pt_opens_with_plain_torch_load_and_is_not_a_resume_point(tmp_path: Path) -> None:
    """torch.load's default is weights_only=True: best.pt (as fasttrain wrote it before model.safetensors became the
    one copy of the best weights) holds tensors, numbers and strings only; folders that have one still read."""
    policy = policies.CheckpointPolicy(tmp_path)
    model = tiny_mlp(seed=3)
    policy.save_last(_payload(model))
    ck.save_atomic(policies.weights_payload(model.state_dict(), epoch=2, val_acc1=0.75), tmp_path / "best.pt")
    best = torch.load(tmp_path / "best.pt")  # the default: weights only
    assert best["epoch"] == 2 and best["val_acc1"] == 0.75
    fresh = tiny_mlp(seed=4)
    fresh.load_state_dict(best["model"])
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), model.state_dict().values(), strict=True))
    assert ck.load(tmp_path / "best.pt")["model"].keys() == model.state_dict().keys()  # checked like any other
    assert ck.candidates(tmp_path) == [tmp_path / "last.pt"] and ck.weights_only(tmp_path / "best.pt")
    policy.save_model(policies.weights_payload(model.state_dict(), epoch=3, val_acc1=0.8))
    assert not (tmp_path / "best.pt").exists()  # superseded by newer best weights: no older copy left behind
