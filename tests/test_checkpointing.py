"""train/loop/checkpointing.py: checkpoints cost a small share of the run (recorded sizes and a fake clock, real
files), and a real run of a model whose checkpoint is not cheap writes last.pt only where it is worth it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from loop_helpers import Clock, tiny_mlp

from fasttrain.train.loop import checkpointing as cp
from fasttrain.train.state import checkpoint as ck
from fasttrain.train.state import checkpoint_policy as policies
from fasttrain.train.state.run_state import Position, RunState


def test_write_due_is_cheap_or_a_small_share() -> None:
    assert cp.write_due(since_last_s=0.1, cost_s=0.01)            # a small model's: every epoch
    assert not cp.write_due(since_last_s=2.0, cost_s=0.7)         # resnet18's last.pt after a 2 s epoch: no
    assert cp.write_due(since_last_s=35.0, cost_s=0.7)            # ... after 35 s: 2% of it, yes
    assert not cp.write_due(since_last_s=34.0, cost_s=0.7)


def _state(model: torch.nn.Module) -> RunState:
    return RunState(model=model.state_dict(), optimizer={}, schedule={"step": 0}, position=Position(0, 1, 0))



def test_a_big_checkpoint_waits_until_it_costs_two_percent(tmp_path: Path) -> None:
    clock = Clock()
    big = torch.nn.Linear(1000, 2500)  # 10 MB of weights: ~0.05 s at 200 MB/s, the estimate before a measurement
    keeper = cp.Checkpointer(policies.CheckpointPolicy(tmp_path), warn=lambda text: None, clock=clock)
    clock.now = 1.0
    assert not keeper.due(_state(big))
    clock.now = 3.0
    assert keeper.due(_state(big))
    keeper.write(_state(big))
    assert (tmp_path / "last.pt").is_file() and keeper.write_s is not None and keeper.last_good == tmp_path / "last.pt"


def test_the_best_weights_wait_in_memory_and_go_out_with_the_next_write(tmp_path: Path) -> None:
    from safetensors.torch import load_file
    keeper = cp.Checkpointer(policies.CheckpointPolicy(tmp_path), warn=lambda text: None)
    model = tiny_mlp(seed=1)
    keeper.new_best(model, epoch=1, val_acc1=0.5)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)  # training goes on: the kept copy must not follow
    assert not (tmp_path / "model.safetensors").exists()
    keeper.write(_state(model))
    best = load_file(str(tmp_path / "model.safetensors"))  # the model files: the one copy of the best weights
    assert not torch.equal(best["1.weight"], model.state_dict()["1.weight"]) and not (tmp_path / "best.pt").exists()
    assert keeper.best is None


def test_a_run_whose_checkpoint_is_not_cheap_writes_last_pt_at_its_end(cli, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Pretend the disk writes 1 KB/s: every epoch-end write of tiny_cnn is then far above 2% of an epoch, so
    last.pt and the model files are written once, after the last epoch, and the run still resumes from there."""
    from loop_helpers import DETERMINISTIC_PROFILE, write_image_folder
    monkeypatch.setattr(cp, "WRITE_BYTES_PER_S", 1e3)
    monkeypatch.chdir(tmp_path)
    write_image_folder(tmp_path / "data")
    (tmp_path / "tiny.yaml").write_text(DETERMINISTIC_PROFILE.replace("epochs: 2", "epochs: 3"))
    saves: list[str] = []
    real_save, real_model = ck.save_atomic, ck.saved.save_trained

    def save(payload, path, **kw):
        saves.append(Path(path).name)
        return real_save(payload, path, **kw)

    def save_model(folder, state, meta):
        saves.append("model.safetensors")
        return real_model(folder, state, meta)
    monkeypatch.setattr(ck, "save_atomic", save)
    monkeypatch.setattr(ck.saved, "save_trained", save_model)
    res = cli("train", "--profile", "tiny.yaml", "--data", "data", "--model", "tiny_cnn", "--run-name", "r",
              "--json", "--no-tune")
    assert res.code == 0, res.err
    assert saves in (["last.pt", "model.safetensors"], ["model.safetensors", "last.pt"]), saves
    assert json.loads(res.out)["epochs_run"] == 3 and ck.load(tmp_path / "runs" / "r" / "last.pt")["epoch"] == 3


def test_the_last_epochs_row_does_not_wait_for_the_final_save(cli, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The final epoch's save is a full write (0.6 s for resnet18 with AdamW on the 2-core machine). Its figures go
    to metrics.jsonl and the display first: with every save slowed by 1.5 s, the last epoch row is logged within
    a fraction of a second of its own `elapsed_s`, and last.pt is still written after it."""
    import time

    from loop_helpers import DETERMINISTIC_PROFILE, write_image_folder
    monkeypatch.chdir(tmp_path)
    write_image_folder(tmp_path / "data")
    (tmp_path / "tiny.yaml").write_text(DETERMINISTIC_PROFILE)
    real_save = ck.save_atomic
    saved_at: list[float] = []

    def slow_save(payload, path, **kw):
        time.sleep(1.5)
        saved_at.append(time.time())
        return real_save(payload, path, **kw)
    monkeypatch.setattr(ck, "save_atomic", slow_save)
    res = cli("train", "--profile", "tiny.yaml", "--data", "data", "--model", "tiny_cnn", "--run-name", "r",
              "--json", "--no-tune")
    assert res.code == 0, res.err
    rows = [json.loads(line) for line in (tmp_path / "runs" / "r" / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if r["kind"] == "epoch"][-1]
    # The row was logged before the final save began (its 1.5 s sleep), whatever the machine's load: on the
    # clock of the save's own end, not against a time limit.
    assert saved_at and last["time"] < saved_at[-1] - 1.5 + 0.05
    assert ck.load(tmp_path / "runs" / "r" / "last.pt")["epoch"] == last["epoch"]
