"""Runs that trained on nothing never succeed: unreadable or vanished data, an empty validation set.
In-process CLI runs of tiny_cnn on real image files written to tmp_path, through the real Trainer."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from image_tree import write_corrupt
from loop_helpers import DETERMINISTIC_PROFILE, write_image_folder


@pytest.fixture
def train(cli, tmp_path: Path):
    (tmp_path / "tiny.yaml").write_text(DETERMINISTIC_PROFILE)

    def run(data: Path, *args: str) -> tuple[object, Path]:
        res = cli("train", "--profile", str(tmp_path / "tiny.yaml"), "--data", str(data), "--model", "tiny_cnn",
                  "--runs-dir", str(tmp_path / "runs"), "--run-name", "r", *args)
        return res, tmp_path / "runs" / "r"
    return run


def _empty_files(root: Path, split: str, classes: int = 3, per_class: int = 8) -> None:
    for c in range(classes):
        folder = root / split / f"class{c}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            (folder / f"{i}.png").write_bytes(b"")


def test_a_folder_of_empty_images_fails_instead_of_training_on_nothing(train, tmp_path) -> None:
    data = tmp_path / "data"
    _empty_files(data, "train")
    _empty_files(data, "val", per_class=4)
    res, run = train(data, "--json")
    assert res.code == 1, res.err
    assert "epoch 1: 24 of 24 files could not be read (latest: " in res.err, res.err
    assert "nothing was trained; check --data (no checkpoint was written)" in res.err
    assert "Traceback" not in res.err and _only_an_error(res.out, 1)  # no summary claims a result
    assert not (run / "summary.json").exists() and not (run / "last.pt").exists()


def test_an_epoch_that_lost_most_of_its_files_fails(train, tmp_path) -> None:
    data = write_image_folder(tmp_path / "data")  # 24 train images, 3 classes
    for c in range(3):
        for i in range(5):  # 15 of 24 unreadable: more than half of the epoch
            write_corrupt(data / "train" / f"class{c}" / f"{i}.png")
    res, run = train(data, "--json")
    assert res.code == 1, res.err
    assert "epoch 1: 15 of 24 files could not be read" in res.err and "only 9 trained; check --data" in res.err
    assert "skipped" in res.err and "unreadable image file(s) so far" in res.err  # the warning came first
    assert "Traceback" not in res.err and not (run / "summary.json").exists()


def test_a_few_bad_files_warn_on_the_live_dashboard_and_the_run_goes_on(train, tmp_path, monkeypatch) -> None:
    from fasttrain.ui import dashboard
    monkeypatch.setattr(dashboard, "choose_mode", lambda quiet, stream=None: "live")
    data = write_image_folder(tmp_path / "data")
    write_corrupt(data / "train" / "class1" / "2.png")
    res, run = train(data, "--epochs", "1")
    assert res.code == 0, res.err
    assert "skipped 1 unreadable image file(s) so far" in res.out + res.err
    assert json.loads((run / "summary.json").read_text())["bad_files"] == 1


def test_a_validation_set_that_yields_nothing_is_said(train, tmp_path) -> None:
    data = write_image_folder(tmp_path / "data", val_per_class=0)
    _empty_files(data, "val", per_class=2)
    res, _run = train(data, "--json", "--epochs", "1")
    assert res.code == 0, res.err  # training itself was fine
    assert "validation in epoch 1 saw no image: 6 file(s) could not be read (latest: " in res.err, res.err
    assert "no val loss or accuracy for this epoch" in res.err
    assert json.loads(res.out)["epochs_run"] == 1


def test_data_deleted_during_epoch_two_stops_and_names_the_folder(train, tmp_path, monkeypatch) -> None:
    from fasttrain.train.loop.step import StepEngine
    data = write_image_folder(tmp_path / "data")  # 6 batches of 4 per epoch
    original = StepEngine.step
    deleted: list[int] = []

    def train_batch(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if self.schedule.step == 8 and not deleted:  # epoch 2, batch 2 done: the folder goes away
            shutil.rmtree(data)
            deleted.append(self.schedule.step)
        return out
    monkeypatch.setattr(StepEngine, "step", train_batch)
    # the per-image path reads the files every epoch (decoded once into RAM, they would not be read again)
    res, run = train(data, "--json", "--epochs", "3", "--set", "loader.decode_once=false")
    assert deleted == [8]
    assert res.code == 1, res.err
    assert "epoch 2: 16 of 24 files could not be read" in res.err, res.err
    assert f"the folder {data} no longer exists" in res.err
    assert f"the last good checkpoint is {run / 'last.pt'}" in res.err
    assert "Traceback" not in res.err and _only_an_error(res.out, 1) and not (run / "summary.json").exists()
    from fasttrain.train.state import checkpoint as ck
    assert ck.load(run / "last.pt")["epoch"] == 1  # epoch 1's checkpoint is kept, nothing after it claimed


def test_images_decoded_once_survive_their_folder_going_away(train, tmp_path, monkeypatch) -> None:
    from fasttrain.train.loop.step import StepEngine
    data = write_image_folder(tmp_path / "data")  # 6 batches of 4 per epoch, decoded into RAM in epoch 1
    original = StepEngine.step

    def train_batch(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        if self.schedule.step == 8 and data.exists():
            shutil.rmtree(data)
        return out
    monkeypatch.setattr(StepEngine, "step", train_batch)
    res, _run = train(data, "--json", "--epochs", "3")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert not data.exists() and summary["epochs_run"] == 3 and summary["bad_files"] == 0
    assert [h["train_images"] for h in summary["history"]] == [24, 24, 24]


def _only_an_error(stdout: str, code: int) -> bool:
    """Under --json stdout holds the failure as {"error": ...} and nothing that reads like a result."""
    import json
    return set(json.loads(stdout)) == {"error"} and json.loads(stdout)["error"]["code"] == code
