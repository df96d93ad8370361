"""The run directory: naming rule, profile.yaml, metrics.jsonl, TensorBoard events, summary.json."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from fasttrain.core.errors import UserError
from fasttrain.profiles import presets
from fasttrain.profiles.schema import Profile
from fasttrain.train.loop.epoch_row import EpochRow
from fasttrain.train.run.runlog import RunLog, new_run_dir, read_metrics
from fasttrain.train.run.summary import RunSummary


def test_run_dir_named_from_date_and_profile(tmp_path: Path) -> None:
    when = datetime(2026, 11, 22, 3, 4, 5)
    first = new_run_dir(tmp_path / "runs", None, profile="cpu", now=when)
    assert first == tmp_path / "runs" / "20261122-030405-cpu" and first.is_dir()
    # the same second twice (two runs started together): the second gets a suffix, never the same directory
    assert new_run_dir(tmp_path / "runs", None, profile="cpu", now=when).name == "20261122-030405-cpu-2"


def test_existing_name_gets_the_next_free_suffix_unless_resuming(tmp_path: Path) -> None:
    assert new_run_dir(tmp_path, "exp").name == "exp"
    (tmp_path / "exp" / "metrics.jsonl").write_text("{}\n")
    assert new_run_dir(tmp_path, "exp").name == "exp-2"
    assert new_run_dir(tmp_path, "exp").name == "exp-3"
    resumed = new_run_dir(tmp_path, "exp", resume=True)
    assert resumed == tmp_path / "exp" and (resumed / "metrics.jsonl").read_text() == "{}\n"


@pytest.mark.parametrize("bad", ["../escape", "a/b", "with space", ""])
def test_bad_run_names_are_user_errors(tmp_path: Path, bad: str) -> None:
    with pytest.raises(UserError) as err:
        new_run_dir(tmp_path, bad)
    assert err.value.lines()[0].startswith("--run-name:")


def test_metrics_jsonl_lines_parse(tmp_path: Path) -> None:
    log = RunLog(tmp_path, tensorboard=False)
    for step in range(1, 4):
        log.log_step({"step": step, "epoch": 0, "loss": 2.0 / step, "lr": 0.1, "images_per_s": 640.0})
    log.log_step({"step": 4, "loss": float("nan"), "grad_norm": float("inf")})  # a diverged step stays valid JSON
    log.log_epoch(EpochRow(epoch=1, train_loss=1.1, val_acc1=0.5, val_images=4, extra={"paths": [Path("x.png")]}))
    # each line is on disk as soon as it is logged (line-buffered), before close()
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 5
    log.close()
    raw = (tmp_path / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in raw]  # strict JSON per line
    assert "NaN" not in "".join(raw)
    assert [r["kind"] for r in records] == ["step"] * 4 + ["epoch"]
    assert all(isinstance(r["time"], float) for r in records)
    assert records[1]["loss"] == 1.0 and records[3]["loss"] is None and records[3]["grad_norm"] is None
    assert EpochRow.from_json(records[4]).extra == {"kind": "epoch", "time": records[4]["time"], "paths": ["x.png"]}
    assert read_metrics(tmp_path / "metrics.jsonl") == records
    assert not (tmp_path / "tb").exists()
    with pytest.raises(RuntimeError):
        log.log_step({"step": 5})


def test_tensorboard_event_file_holds_the_scalars(tmp_path: Path) -> None:
    with RunLog(tmp_path) as log:
        for step in range(1, 6):
            log.log_step({"step": step, "loss": 1.0 / step, "lr": 0.1, "note": "text is not a scalar"})
        log.log_epoch(EpochRow(epoch=0, train_loss=0.5, val_acc1=0.75, val_images=4))
    events = list((tmp_path / "tb").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert {"train/loss", "train/lr", "epoch/val_acc1", "epoch/train_loss"} <= set(acc.Tags()["scalars"])
    assert not {"epoch/val_loss", "epoch/lr"} & set(acc.Tags()["scalars"])  # None is no scalar
    loss = acc.Scalars("train/loss")
    assert [e.step for e in loss] == [1, 2, 3, 4, 5]
    assert loss[-1].value == pytest.approx(0.2)
    assert acc.Scalars("epoch/val_acc1")[0].value == pytest.approx(0.75)


def test_resolved_profile_yaml_round_trips(tmp_path: Path) -> None:
    resolved = presets.resolve("aws-a10g", sets=["loader.num_workers=8"])
    log = RunLog(tmp_path, tensorboard=False)
    path = log.write_profile(resolved.profile.model_dump(), header="resolved from aws-a10g\n--set loader.num_workers=8")
    log.close()
    text = path.read_text()
    assert text.startswith("# resolved from aws-a10g\n# --set loader.num_workers=8\n")
    again = Profile.model_validate(yaml.safe_load(text))
    assert again == resolved.profile and again.loader.num_workers == 8
    assert presets.resolve(str(path)).profile == resolved.profile  # the file reruns the same run


def test_summary_json(tmp_path: Path) -> None:
    log = RunLog(tmp_path, tensorboard=False)
    log.write_summary(RunSummary.from_json({"best_val_acc1": 0.93, "final_loss": float("nan"), "run_dir": tmp_path}))
    log.close()
    data = RunSummary.from_json(json.loads((tmp_path / "summary.json").read_text()))
    assert data.best_val_acc1 == 0.93 and data.run_dir == str(tmp_path)
    assert data.extra == {"final_loss": None}  # a key this fasttrain does not know is kept; NaN written as null
    assert not list(tmp_path.glob("*.tmp"))
