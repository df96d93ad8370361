"""The end of a run (issue 25, point 9): words instead of raw keys, one time format, the files and the commands
that come next, the verdict; a resumed run's rate covers the same session as its time."""
from __future__ import annotations

import json
import re
from pathlib import Path

from loop_helpers import TINY_PROFILE, write_image_folder

from fasttrain.train.run.summary import RunSummary
from fasttrain.ui.ending import ending_lines, ending_rows

SUMMARY = {"run_dir": "runs/20261125-cpu", "epochs_run": 12, "final_val_acc1": 0.97, "final_val_acc5": 1.0,
           "best_val_acc1": 0.97, "best_epoch": 12, "final_train_loss": 0.144, "final_val_loss": 0.107,
           "train_images_per_s": 2049.3, "wall_s": 155.2, "fit_s": 29.4, "checkpoint_last": "runs/20261125-cpu/last.pt",
           "checkpoint_best": "runs/20261125-cpu/best.pt", "bad_files": 0, "nonfinite_steps": 0,
           "verdict": "compute-bound: 92% of each step is compute", "history": [{"epoch": 1}]}


def test_the_ending_reads_in_words_with_the_next_commands() -> None:
    rows = dict(ending_rows(RunSummary.from_json(SUMMARY)))
    assert not [label for label in rows if "_" in label]  # no raw JSON keys
    assert rows["time"] == "0:02:35" and "29.4 s" not in " ".join(rows.values())
    assert rows["best weights"] == "runs/20261125-cpu/best.pt"
    assert rows["TensorBoard"] == "tensorboard --logdir runs/20261125-cpu/tb"
    assert rows["train further"] == "fasttrain train --resume runs/20261125-cpu --epochs 24"
    assert rows["verdict"].startswith("compute-bound")
    assert rows["accuracy"] == "acc@1 97.0%, acc@5 100.0% (best acc@1 97.0% at epoch 12)"
    assert "problems" not in rows and "history" not in " ".join(ending_lines(RunSummary.from_json(SUMMARY)))


def test_the_ending_says_the_time_to_accuracy_and_the_budget() -> None:
    timed = {**SUMMARY, "milestones": [{"val_acc1": 0.9, "epoch": 2, "elapsed_s": 12.3},
                                       {"val_acc1": 0.95, "epoch": 3, "elapsed_s": 18.0}],
             "time_budget": {"budget_s": 90.0, "source": "--time-budget 90s", "used_s": 84.0, "margin_s": 6.0}}
    rows = dict(ending_rows(RunSummary.from_json(timed)))
    assert rows["time to accuracy"] == "90% at 0:00:12 (epoch 2), 95% at 0:00:18 (epoch 3)"
    assert rows["time budget"] == "0:01:30 (--time-budget 90s): used 0:01:24, 0:00:06 left"
    over = {**timed, "time_budget": {**timed["time_budget"], "used_s": 95.0, "margin_s": -5.0}}
    assert dict(ending_rows(RunSummary.from_json(over)))["time budget"].endswith("over by 0:00:05")
    plain = dict(ending_rows(RunSummary.from_json(SUMMARY)))
    assert "time budget" not in plain and "time to accuracy" not in plain
    # the milestones count from the command's start, the run's time from the run's: both are said
    launched = {**timed, "wall_s": 18.2, "history": [{"epoch": 12, "elapsed_s": 24.3}]}
    time_row = dict(ending_rows(RunSummary.from_json(launched)))["time"]
    assert time_row == "0:00:18 training (0:00:24 since the command started)"


def test_a_stopped_run_ends_with_its_resume_command_not_train_further() -> None:
    stopped = {**SUMMARY, "stop_message": "fasttrain: stopped by SIGTERM after optimizer step 40 (epoch 3, batch 4); "
               "checkpoint runs/x/last.pt written.\nfasttrain: resume with: fasttrain train --resume runs/x",
               "resume_command": "fasttrain train --resume runs/x", "nonfinite_steps": 2}
    rows = dict(ending_rows(RunSummary.from_json(stopped)))
    assert rows["stopped"].startswith("stopped by SIGTERM") and rows["resume"] == "fasttrain train --resume runs/x"
    assert "train further" not in rows and rows["problems"] == "2 non-finite steps skipped"


def test_a_real_run_ends_with_the_ending_and_a_resume_reports_its_own_rate(cli, tmp_path: Path) -> None:
    data = write_image_folder(tmp_path / "data", classes=3, train_per_class=8, val_per_class=4)
    profile = tmp_path / "tiny.yaml"
    profile.write_text(TINY_PROFILE)
    runs = tmp_path / "runs"
    first = cli("train", "--profile", str(profile), "--data", str(data), "--model", "tiny_cnn", "--runs-dir", str(runs),
                "--run-name", "r", "--no-tune")
    assert first.code == 0, first.err
    for needle in ("run folder", "model files", "checkpoints", "tensorboard --logdir", "train further", "--epochs 4"):
        assert needle in first.out, needle
    assert not re.search(r"^\s+\w+_\w+: ", first.out, re.M)  # no `  raw_key: value` lines
    again = cli("train", "--resume", str(runs / "r"), "--epochs", "3", "--no-tune", "--json")
    assert again.code == 0, again.err
    summary = RunSummary.from_json(json.loads(again.out))
    last, rate = summary.history[-1], summary.train_images_per_s
    assert summary.epochs_run == 3 and rate is not None
    assert abs(rate - last.train_images / last.train_s) < 1e-6 * rate
