"""A budgeted run's ending (issue 43 item 5): `train further ... --epochs 40` ignored the budget. The checkpoint keeps
the budget, all spent, so that command trained one step and stopped; the ending now gives the run a budget again
and says what it buys at the run's pace."""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from conftest import run_subprocess
from loop_helpers import TINY_PROFILE, write_image_folder

from fasttrain.train.run.summary import RunSummary
from fasttrain.ui.ending import ending_lines, ending_rows

ONE = {"OMP_NUM_THREADS": "1"}  # the suite's workers share the cores

HISTORY = [{"epoch": e, "train_s": 5.2, "val_s": 0.8, "train_images": 60000} for e in range(1, 20)] + \
    [{"epoch": 20, "train_s": 5.0, "val_s": 0.8, "train_images": 58700}]  # the budget ended the last one early
BUDGETED = {"run_dir": "runs/fmnist", "epochs_run": 20, "history": HISTORY,
            "time_budget": {"budget_s": 120.0, "used_s": 119.2, "margin_s": 0.8, "source": "--time-budget"}}


def _further(summary: dict) -> tuple[str, str]:
    rows = ending_rows(RunSummary.from_json(summary))
    at = [label for label, _ in rows].index("train further")
    return rows[at][1], rows[at + 1][1] if rows[at + 1][0] == "" else ""


def test_a_budgeted_run_is_trained_further_with_a_budget_not_epochs() -> None:
    command, words = _further(BUDGETED)
    assert command == "fasttrain train --resume runs/fmnist --time-budget 4m"
    assert "--epochs" not in command
    # the budget counts the whole run: 1:59 used + 2:00 more; 2 min at 6 s an epoch (the whole epochs' median)
    assert words == "the budget counts the whole run: 0:02:00 more, about 20 epochs at this run's pace"


def test_the_other_budgets_and_a_plain_run() -> None:
    cost = {**BUDGETED, "time_budget": {**BUDGETED["time_budget"], "source": "--max-cost 2.5 USD"}}
    assert _further(cost)[0].endswith("--max-cost 5")
    deadline = {**BUDGETED, "time_budget": {**BUDGETED["time_budget"], "source": "--deadline 23:30"}}
    command, words = _further(deadline)
    assert command.endswith("--deadline HH:MM") and "later time of day" in words
    plain = {k: v for k, v in BUDGETED.items() if k != "time_budget"}
    assert _further(plain) == ("fasttrain train --resume runs/fmnist --epochs 40",
                               "20 more epochs, about 0:02:00 at this run's pace")


def test_the_ending_breaks_between_words_at_80_columns_and_its_commands_still_copy() -> None:
    summary = {**BUDGETED, "run_dir": "/home/kaggle/working/experiments/runs/20261128-152231-cpu",
               "verdict": "compute-bound: 94% of each step is compute, the input pipeline keeps up; a larger batch "
                          "or a smaller model would go faster",
               "model_files": "/home/kaggle/working/experiments/runs/20261128-152231-cpu/model.safetensors + "
                              "model.json (from best.pt)"}
    record = RunSummary.from_json(summary)
    lines = ["  " + ln for ln in ending_lines(record, 78)]
    assert all(len(ln) <= 80 for ln in lines), max(lines, key=len)
    text = "\n".join(lines)
    words = set(re.findall(r"[A-Za-z]+", text))
    for word in re.findall(r"[A-Za-z]+", f"{record.verdict} {record.model_files}"):
        assert word in words, word  # each whole on one line: `pipelin|e` was the complaint
    at = next(i for i, ln in enumerate(lines) if "train further" in ln)
    command = lines[at].split("train further", 1)[1]
    while command.endswith(" \\"):  # a shell joins ` \` lines: the copied lines are the one command
        at += 1
        command = command[:-2] + " " + lines[at].strip()
    assert shlex.split(command) == shlex.split(_further(summary)[0])
    assert len(ending_lines(record)) == len(ending_rows(record))  # off a terminal: one line a row, whole


def test_the_suggested_command_trains_a_budgeted_run_further(tmp_path: Path) -> None:
    """Real child processes: a budget's clock starts with the process (the imports count), as the user's does."""
    data = write_image_folder(tmp_path / "data", classes=3, train_per_class=8, val_per_class=4)
    profile = tmp_path / "tiny.yaml"
    profile.write_text(TINY_PROFILE)
    first = run_subprocess("train", "--profile", str(profile), "--data", str(data), "--model", "tiny_cnn",
                           "--run-name", "b", "--no-tune", "--time-budget", "10s", "--set", "optim.epochs=1", "--json",
                           cwd=tmp_path, env=ONE)  # the profile's epochs, which a budget does not use, all done
    assert first.returncode == 0, first.stderr[-3000:]
    before = json.loads(first.stdout)
    command, _ = _further(before)
    assert "--time-budget" in command
    again = run_subprocess(*shlex.split(command)[1:], "--json", cwd=tmp_path, env=ONE)
    assert again.returncode == 0, again.stderr[-3000:]
    after, earlier = RunSummary.from_json(json.loads(again.stdout)), RunSummary.from_json(before)
    # `--epochs 2N` trained one step (the budget was spent), and the resume had refused the budget's command: "the
    # run already finished epoch 3 of 1"; the budget given again is used, on whole epochs
    assert after.time_budget is not None and earlier.time_budget is not None
    assert (after.time_budget.used_s or 0) - (earlier.time_budget.used_s or 0) >= 5.0, after.time_budget
    new_rows = after.history[len(earlier.history):]
    assert sum(r.train_images for r in new_rows) >= 24, new_rows
    shown = [(int(e), int(n)) for e, n in re.findall(r"epoch done: epoch (\d+)/(\d+)", again.stderr)]
    assert shown and all(e <= n for e, n in shown), shown  # a resumed budget run read `epoch 3/1`
