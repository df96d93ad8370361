"""Faults inside a run: non-finite steps, out of memory, corrupt images, a full disk, and the state
a resume depends on (GradScaler, LR schedule). In-process CLI runs on real image files and the real Trainer."""
from __future__ import annotations

import errno
import json
import math
from pathlib import Path

import pytest
import torch
from conftest import REPO
from image_tree import write_corrupt
from loop_helpers import DETERMINISTIC_PROFILE, cpu_plan, make_trainer, tiny_mlp, tiny_run_folder

from fasttrain.train.loop.events import Collaborators
from fasttrain.train.loop.trainer import Trainer
from fasttrain.train.state import checkpoint as ck
from fasttrain.train.state.checkpoint_policy import CheckpointPolicy
from fasttrain.train.state.run_state import Resume, RunExtras, RunState

# Plain SGD at a constant LR, so a skipped or split step shows in the weights as it is.
PROFILE = DETERMINISTIC_PROFILE.replace("optim:\n", "optim:\n  optimizer: sgd\n  schedule: constant\n")
assert "optimizer: sgd" in PROFILE


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_run_folder(tmp_path_factory.mktemp("faults"), PROFILE)  # 6 batches of 4 per epoch


@pytest.fixture
def train(cli, tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(REPO / "tests"))  # fault_models

    def run(*args: str, data: Path | None = None) -> tuple[object, Path]:
        res = cli("train", "--profile", str(tree / "tiny.yaml"), "--data", str(data or tree / "data"),
                  "--runs-dir", str(tmp_path / "runs"), "--run-name", "r", "--json", *args)
        return res, tmp_path / "runs" / "r"
    return run


def _steps(run: Path) -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "step"]


# -- non-finite loss ---------------------------------------------------------------------------------
def test_nan_stops_after_three_in_a_row_and_keeps_the_last_good_checkpoint(train, monkeypatch) -> None:
    monkeypatch.setenv("FAULT_NAN_FROM", "8")  # epoch 2, batch 3 onwards
    res, run = train("--model", "fault_models:nan_net")
    assert res.code == 1, res.err
    assert "3 steps in a row had a non-finite loss" in res.err and "epoch 2, batch 5" in res.err
    assert "LR 0.0001875" in res.err and f"Last good checkpoint: {run / 'last.pt'} (intact)" in res.err
    error = json.loads(res.out)["error"]  # under --json a failed job is a JSON object on stdout too (exit 1)
    assert error["code"] == 1 and "3 steps in a row had a non-finite loss" in error["problems"][0]["message"]
    payload = ck.load(run / "last.pt")
    assert payload["epoch"] == 1 and all(torch.isfinite(t).all() for t in payload["model"].values())


def test_nan_skip_keeps_training_with_finite_weights(train, monkeypatch) -> None:
    monkeypatch.setenv("FAULT_NAN_FROM", "8")
    res, run = train("--model", "fault_models:nan_net", "--on-nan", "skip")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["nonfinite_steps"] == 4 and summary["history"][1]["train_nonfinite_batches"] == 4
    payload = ck.load(run / "last.pt")
    assert payload["epoch"] == 2 and all(torch.isfinite(t).all() for t in payload["model"].values())


def test_one_nan_step_is_skipped_not_applied() -> None:
    plan, profile = cpu_plan(optim={"optimizer": "sgd", "momentum": 0.0, "weight_decay": 0.0, "epochs": 1,
                                    "warmup_epochs": 0, "schedule": "constant"}, speed={"precision": "fp32"})
    trainer = make_trainer(plan, profile.optim, tiny_mlp(), batches=2)
    x, y = torch.randn(4, 12), torch.randint(0, 3, (4,))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    row = trainer.train_epoch([(x * float("nan"), y), (x, y)], epoch=0)
    assert row["train_nonfinite_batches"] == 1
    after = list(trainer.model.parameters())
    assert all(torch.isfinite(p).all() for p in after) and any(
        not torch.equal(a, b) for a, b in zip(before, after, strict=True)
    )


# -- out of memory -----------------------------------------------------------------------------------
def test_out_of_memory_halves_the_batch_and_keeps_effective_batch_and_lr(train, monkeypatch) -> None:
    monkeypatch.setenv("FAULT_OOM_ABOVE", "1000")  # never: the reference
    ref, ref_run = train("--model", "fault_models:oom_net", "--epochs", "1", "--set", "loader.batch_size=8")
    assert ref.code == 0, ref.err
    ref_lrs = [r["lr"] for r in _steps(ref_run)]
    ref_weights = ck.load(ref_run / "last.pt")["model"]
    import shutil

    shutil.rmtree(ref_run)
    monkeypatch.setenv("FAULT_OOM_ABOVE", "2")  # batch 8 -> 4 -> 2
    res, run = train("--model", "fault_models:oom_net", "--epochs", "1", "--set", "loader.batch_size=8")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert [(e["batch_from"], e["batch_to"]) for e in summary["oom_backoffs"]] == [(8, 4), (4, 2)]
    assert [(e["accumulation_from"], e["accumulation_to"]) for e in summary["oom_backoffs"]] == [(1, 2), (2, 4)]
    assert summary["micro_batch"] == 2 and summary["accumulation_steps"] == 4 and summary["effective_batch"] == 8
    assert all(e["effective_batch"] == 8 for e in summary["oom_backoffs"])
    assert "out of memory at step 1 (epoch 1, batch 1): per-device batch 8 -> 4" in res.err  # the dashboard
    steps = _steps(run)
    assert [r["lr"] for r in steps] == ref_lrs  # same LR at every logged step
    assert steps[-1]["batch_size"] == 2 and steps[-1]["accumulation_steps"] == 4
    weights = ck.load(run / "last.pt")["model"]  # same update: micro-batch sums equal the batch's mean
    assert all(torch.allclose(weights[k], ref_weights[k], atol=1e-6) for k in weights)


def test_out_of_memory_at_batch_one_stops_with_a_clear_message(train, monkeypatch) -> None:
    monkeypatch.setenv("FAULT_OOM_ABOVE", "0")
    res, _ = train("--model", "fault_models:oom_net", "--epochs", "1")
    assert res.code == 1 and "with a per-device batch of 1" in res.err and "Traceback" not in res.err


# -- bad data, full disk -----------------------------------------------------------------------------
def test_corrupt_images_are_counted_on_the_dashboard_and_in_the_summary(train, tree, tmp_path) -> None:
    import shutil

    data = tmp_path / "data"
    shutil.copytree(tree / "data", data)
    write_corrupt(data / "train" / "class0" / "broken.png")
    res, run = train("--model", "tiny_cnn", "--epochs", "1", data=data)
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["bad_files"] == 1 and summary["bad_file_paths"][0].endswith("broken.png")
    assert "skipped 1 unreadable image file(s) so far" in res.err
    assert json.loads((run / "summary.json").read_text())["bad_files"] == 1


def test_full_disk_keeps_the_previous_checkpoint_and_says_so(train, monkeypatch) -> None:
    real_save, calls = torch.save, []

    def save(obj, f, *args, **kwargs):
        calls.append(1)
        if len(calls) > 1:  # last.pt of epoch 1 (the model files are safetensors')
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)
    res, run = train("--model", "tiny_cnn")
    assert res.code == 0, res.err
    assert "the disk is full" in res.err and "the previous last.pt is kept" in res.err
    assert ck.load(run / "last.pt")["epoch"] == 1
    assert json.loads(res.out)["checkpoint_errors"] and not list(run.glob(".*.tmp"))


# -- state a resume depends on -----------------------------------------------------------------------
def test_gradscaler_and_schedule_state_come_back(tmp_path: Path) -> None:
    optim = {"optimizer": "sgd", "momentum": 0.9, "epochs": 3, "warmup_epochs": 1, "schedule": "cosine"}
    plan, profile = cpu_plan(optim=optim)
    plan.precision = "fp16-mixed"  # forced on the CPU: the GradScaler path, as in test_precision.py
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 12, generator=gen), torch.randint(0, 3, (4,), generator=gen)) for _ in range(4)]
    batches[1] = (batches[1][0] * 1e30, batches[1][1])  # overflows fp16: the scaler backs off

    def fresh() -> Trainer:
        return make_trainer(
            plan,
            profile.optim,
            tiny_mlp(),
            batches=4,
            collaborators=Collaborators(checkpoints=CheckpointPolicy(tmp_path)),
        )

    first = fresh()
    first.train_epoch(batches, epoch=0)
    one = first.engine
    scale = one.precision.scale
    assert scale == 2.0**15 and one.schedule.step == 4
    path = ck.save_atomic(first.snapshot(1).to_payload(), tmp_path / "last.pt")
    second = fresh()
    second.restore(Resume(path, RunState.from_payload(ck.load(path))))
    two = second.engine
    assert two.precision.scaler.state_dict() == one.precision.scaler.state_dict()
    assert two.precision.scale == scale
    assert two.schedule.state_dict() == one.schedule.state_dict()
    assert two.schedule.current() == one.schedule.current() != 0
    for t in (first, second):  # and both continue identically
        t.train_epoch(batches[2:], epoch=1)
    for a, b in zip(first.model.state_dict().values(), second.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_save_every_minutes_writes_mid_epoch_checkpoints(tmp_path: Path) -> None:
    plan, profile = cpu_plan(optim={"optimizer": "sgd", "epochs": 1, "warmup_epochs": 0})
    trainer = make_trainer(
        plan,
        profile.optim,
        tiny_mlp(),
        batches=3,
        save_every_s=0.0,
        collaborators=Collaborators(checkpoints=CheckpointPolicy(tmp_path)),
        extras=lambda consumed: RunExtras(args={"consumed": consumed}),
    )
    x, y = torch.randn(4, 12), torch.randint(0, 3, (4,))
    trainer.train_epoch([(x, y)] * 3, epoch=0)
    payload = ck.load(tmp_path / "last.pt")  # written after batch 2 (a save after the last batch is the epoch's)
    assert (payload["epoch"], payload["batch_in_epoch"], payload["args"]["consumed"]) == (0, 2, 2)
    assert payload["partial"]["images"] == 8 and math.isfinite(payload["partial"]["loss_sum"])


# -- signal handlers ---------------------------------------------------------------------------------
def test_graceful_stop_installs_in_the_main_thread_only_and_restores() -> None:
    import signal
    import threading

    from fasttrain.train.signals.lifecycle import GracefulStop

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with GracefulStop() as stop:
        assert signal.getsignal(signal.SIGTERM) == stop._handle
        signal.raise_signal(signal.SIGTERM)  # first signal: only recorded
        assert stop.requested == signal.SIGTERM and stop.exit_code == 0 and stop.name == "SIGTERM"
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
    seen: list[object] = []

    def in_thread() -> None:
        with GracefulStop():
            seen.append(signal.getsignal(signal.SIGTERM))

    worker = threading.Thread(target=in_thread)
    worker.start()
    worker.join()
    assert seen == [before[0]]  # signal.signal would raise outside the main thread: nothing was installed
    with pytest.raises(KeyboardInterrupt), GracefulStop() as stop:
        signal.raise_signal(signal.SIGINT)
        assert stop.exit_code == 130
        signal.raise_signal(signal.SIGINT)  # the second Ctrl-C stops at once
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
