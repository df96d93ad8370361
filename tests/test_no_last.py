"""Issue 43 item 8 (c): a short run can do without last.pt (`--no-last`, profile `checkpoint.save_last: false`).

The plan says what that costs (the run cannot be resumed); the run leaves its model files only; `--resume` of such a
run is one line, exit 2; a stop (SIGTERM) ends cleanly and says the run cannot be resumed, with no resume command; the
settings that make resume points (--save-every, --save-every-minutes, --resume) are refused beside it. Real tiny runs
on real PNG files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import one_error_line, run_subprocess
from loop_helpers import tiny_run_folder

ENV = {"OMP_NUM_THREADS": "1"}
BASE = ("train", "--profile", "tiny.yaml", "--data", "data", "--model", "tiny_cnn", "--no-tune")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_run_folder(tmp_path_factory.mktemp("nolast"))


def test_the_plan_says_the_run_cannot_be_resumed(work: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(work)
    for switch in (("--no-last",), ("--set", "checkpoint.save_last=false")):
        res = cli(*BASE, "--epochs", "1", "--dry-run", *switch)
        assert res.code == 0, res.err
        line = next(ln for ln in res.out.splitlines() if ln.startswith("checkpoints "))
        assert "no last.pt" in line and "cannot be resumed" in line and "model.safetensors" in line, line
    res = cli(*BASE, "--epochs", "1", "--dry-run", "--json", "--no-last")
    assert set(json.loads(res.out)["checkpoints"]["files"]) == {"model.safetensors", "model.json"}


def test_a_run_without_last_pt_leaves_its_model_files_and_refuses_resume(work: Path, cli,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(work)
    done = cli(*BASE, "--epochs", "1", "--run-name", "short", "--no-last")
    assert done.code == 0, done.err[-2000:]
    run = work / "runs" / "short"
    assert not list(run.glob("*.pt")) and (run / "model.safetensors").is_file() and (run / "model.json").is_file()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["checkpoint_last"] is None and summary["checkpoint_bytes"].keys() == {"model.safetensors",
                                                                                        "model.json"}
    assert "--resume" not in done.out and "train further" not in done.out, done.out
    line = one_error_line(cli("train", "--resume", str(run)), "checkpoint.save_last", "cannot be resumed")
    assert "--weights" in line  # what can be done instead: start a new run from its weights
    one_error_line(cli("train", "--resume", "auto", "--run-name", "short"), "cannot be resumed")
    assert cli("predict", str(run), "--data", "data/val").code == 0


def test_a_stop_of_a_run_without_last_pt_says_it_cannot_be_resumed(work: Path) -> None:
    stopped = run_subprocess(*BASE, "--epochs", "2", "--run-name", "stopped", "--no-last", env={
        **ENV, "FASTTRAIN_TEST_SIGNAL_AT_STEP": "8"}, cwd=work, timeout=240)  # 6 steps an epoch: in epoch 2
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    assert "Traceback" not in stopped.stderr and "resume with" not in stopped.stderr, stopped.stderr
    assert "stopped by SIGTERM" in stopped.stderr and "cannot be resumed" in stopped.stderr, stopped.stderr
    run = work / "runs" / "stopped"
    assert not list(run.glob("*.pt")) and (run / "model.safetensors").is_file()  # epoch 1's weights are kept
    assert json.loads((run / "model.json").read_text())["epoch"] == 1


@pytest.mark.parametrize("flags, named", [(("--save-every-minutes", "5"), "--save-every-minutes"),
                                          (("--save-every", "1"), "--save-every")])
def test_settings_that_write_resume_points_are_refused_beside_it(work: Path, cli, monkeypatch: pytest.MonkeyPatch,
                                                                 flags: tuple[str, ...], named: str) -> None:
    monkeypatch.chdir(work)
    one_error_line(cli(*BASE, "--epochs", "1", "--dry-run", "--no-last", *flags), named, "--no-last")


def test_resuming_a_run_with_no_last_is_refused(work: Path, cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(work)
    done = cli(*BASE, "--epochs", "1", "--run-name", "full")
    assert done.code == 0, done.err[-2000:]
    one_error_line(cli("train", "--resume", "runs/full", "--epochs", "2", "--no-last"), "--no-last", "--resume")
    assert (work / "runs" / "full" / "last.pt").is_file()
