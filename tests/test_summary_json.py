"""What `fasttrain train --json` prints, summary.json and metrics.jsonl keep the keys, nesting and value types they
had before the summary and the epoch rows became typed records (issue 40): four real tiny runs (a plain one, one
under a time budget, one stopped by SIGTERM, its resume) against tests/fixtures/summary_json_baseline.json."""
from __future__ import annotations

import json
from pathlib import Path

from conftest import run_subprocess
from loop_helpers import TINY_PROFILE, write_image_folder
from summary_shape import BASELINE, RUNS, differences, run_shapes

from fasttrain.train.run.summary import RunSummary


def test_the_json_of_a_run_keeps_every_key_its_nesting_and_its_types(cli, tmp_path: Path) -> None:
    data = write_image_folder(tmp_path / "data", classes=3, train_per_class=8, val_per_class=4)
    (tmp_path / "tiny.yaml").write_text(TINY_PROFILE)
    runs = tmp_path / "runs"
    base = ("train", "--profile", str(tmp_path / "tiny.yaml"), "--data", str(data), "--model", "tiny_cnn",
            "--runs-dir", str(runs), "--no-tune", "--epochs", "2", "--json")
    printed = {"plain": cli(*base, "--run-name", "plain"),
               "budget": cli(*base, "--run-name", "budget", "--time-budget", "30s")}
    stopped = run_subprocess(*base, "--run-name", "stopped", env={"FASTTRAIN_TEST_SIGNAL_AT_STEP": "3"}, cwd=tmp_path)
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    shapes = {name: run_shapes(result.out, runs / name) for name, result in printed.items()}
    shapes["stopped"] = run_shapes(stopped.stdout, runs / "stopped")
    resumed = cli("train", "--resume", str(runs / "stopped"), "--epochs", "2", "--no-tune", "--json")
    shapes["resumed"] = run_shapes(resumed.out, runs / "stopped")
    recorded = json.loads(BASELINE.read_text())["runs"]
    for name in RUNS:
        assert differences(recorded[name], shapes[name]) == [], name
        assert shapes[name]["metrics.jsonl key order"] == recorded[name]["metrics.jsonl key order"], name
        assert shapes[name]["stdout"] == shapes[name]["summary.json"], name  # --json prints summary.json
    # a file read back and written again is the same JSON, key for key and value for value
    for name in ("plain", "resumed"):
        written = json.loads((runs / name / "summary.json").read_text()) if name == "plain" else json.loads(resumed.out)
        assert RunSummary.from_json(written).to_json() == written, name


def test_the_shape_comparison_sees_a_lost_key_a_new_one_and_a_changed_type() -> None:
    old = {"a": "int", "b": [{"c": "float"}], "d": "str|null"}
    assert differences(old, {"a": "int", "b": [{"c": "float"}], "d": "null"}) == []  # an optional value left empty
    assert differences(old, {"a": "str", "b": [{"c": "float"}], "d": "str"}) == [".a: int became str"]
    assert differences(old, {"a": "int", "b": [{"e": "float"}], "d": "str"}) == [".b[].c: lost", ".b[].e: new"]
    assert differences(old, {"a": "int", "b": "int", "d": "str"}) == [".b: [{'c': 'float'}] became 'int'"]


def test_a_summary_with_nulls_where_values_are_due_reads_back_with_the_defaults() -> None:
    """A hand-edited (or older) summary.json: null history, init, notes... read as empty, not a crash in
    `fasttrain report` or the ending."""
    from fasttrain.ui.ending import ending_lines

    summary = RunSummary.from_json({"run_dir": "runs/x", "history": None, "init": None, "notes": None,
                                    "milestones": None, "checkpoint_bytes": None, "bad_files": None,
                                    "best_val_acc1": 0.5})
    assert (summary.history, summary.notes, summary.milestones, summary.bad_files) == ((), (), (), 0)
    assert summary.init.weights is None and summary.best_val_acc1 == 0.5
    assert any("runs/x" in line for line in ending_lines(summary))
