"""Resume: a real SIGTERM mid-epoch then --resume ends bit-identical to an uninterrupted run;
SIGINT/double Ctrl-C; SIGKILL while a checkpoint is written; truncated and misfitting checkpoints.

Real subprocesses (`python -m fasttrain train`), real image files, tiny_cnn at 16 px, fp32, one thread.
Where a signal lands is decided by FASTTRAIN_TEST_SIGNAL_AT_STEP (the trainer signals itself right after
that optimizer step: a real signal through the real handler, no race with a clock).
"""
from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import REPO, child_env, run_subprocess
from loop_helpers import DETERMINISTIC_PROFILE, tiny_run_folder

from fasttrain.train.state import checkpoint as ck
from fasttrain.train.state import checkpoint_policy as policies

# 24 train images / batch 4 = 6 steps per epoch, 2 epochs; no randomness left to chance.
PROFILE = DETERMINISTIC_PROFILE
ENV = {"OMP_NUM_THREADS": "1"}
BASE = ("--profile", "tiny.yaml", "--data", "data", "--model", "tiny_cnn", "--save-every", "1")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_run_folder(tmp_path_factory.mktemp("resume"), PROFILE)


def _train(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_subprocess("train", *BASE, *args, env={**ENV, **(env or {})}, cwd=root, timeout=240)


def _train_in_own_group(root: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Like _train, in a new session: a group-wide signal then reaches the run and its workers, not pytest."""
    full = child_env({**ENV, **env})
    return subprocess.run([sys.executable, "-m", "fasttrain", "train", *BASE, *args], capture_output=True,
                          text=True, env=full, cwd=root, timeout=240, start_new_session=True)


@pytest.fixture(scope="module")
def reference(work: Path) -> Path:
    """One uninterrupted run of the full length, shared by the tests below."""
    proc = _train(work, "--run-name", "ref")
    assert proc.returncode == 0, proc.stderr
    return work / "runs" / "ref"


def _assert_same_tensors(a: object, b: object, where: str = "") -> None:
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            _assert_same_tensors(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where  # type: ignore[arg-type]
        for i, (x, y) in enumerate(zip(a, b, strict=True)):  # type: ignore[call-overload]
            _assert_same_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def test_sigterm_mid_epoch_then_resume_is_bit_identical(work: Path, reference: Path) -> None:
    cut = _train(work, "--run-name", "cut", env={"FASTTRAIN_TEST_SIGNAL_AT_STEP": "8"})
    assert cut.returncode == 0, cut.stderr
    assert "stopped by SIGTERM after optimizer step 8 (epoch 2, batch 2)" in cut.stderr
    run = work / "runs" / "cut"
    mid = ck.load(run / "last.pt")
    assert (mid["epoch"], mid["batch_in_epoch"], mid["sampler"]["epoch"], mid["sampler"]["start"]) == (1, 2, 1, 8)
    command = re.search(r"resume with: (.+)", cut.stderr).group(1)  # type: ignore[union-attr]
    assert command == "fasttrain train --resume runs/cut"
    resumed = run_subprocess(*shlex.split(command)[1:], env=ENV, cwd=work, timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from runs/cut/last.pt at epoch 2, batch 2" in resumed.stdout
    a, b = ck.load(reference / "last.pt"), ck.load(run / "last.pt")
    assert (a["epoch"], b["epoch"]) == (2, 2)
    for key in ("model", "optimizer", "schedule", "sampler"):
        _assert_same_tensors(a[key], b[key], key)
    # the cpu preset averages the weights (optim.ema_decay): the average resumes exactly too. Not its batch-norm
    # statistics: each validation re-estimates them on the epoch's batches this process trained (norm_stats.py)
    averaged = {k: v for k, v in a["ema"].items() if ".running_" not in k}
    assert len(averaged) > 8
    _assert_same_tensors(averaged, {k: v for k, v in b["ema"].items() if ".running_" not in k}, "ema")
    assert a["fit"]["history"][1]["train_loss"] == b["fit"]["history"][1]["train_loss"]  # partial sums carried over
    rows = [line for line in (run / "metrics.jsonl").read_text().splitlines() if json.loads(line)["kind"] == "epoch"]
    assert len(rows) == 2  # epoch 1 from the first process, epoch 2 appended by the resumed one


def test_sigint_to_the_process_group_with_a_worker(work: Path) -> None:
    proc = _train_in_own_group(work, "--run-name", "int", "--set", "loader.num_workers=1",
                               env={"FASTTRAIN_TEST_SIGNAL_AT_STEP": "3", "FASTTRAIN_TEST_SIGNALS": "INT",
                                    "FASTTRAIN_TEST_SIGNAL_GROUP": "1"})
    assert proc.returncode == 130, proc.stderr
    assert "stopped by SIGINT after optimizer step 3 (epoch 1, batch 3)" in proc.stderr
    assert "resume with: fasttrain train --resume runs/int" in proc.stderr
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr  # the worker kept quiet
    mid = ck.load(work / "runs" / "int" / "last.pt")
    assert (mid["epoch"], mid["batch_in_epoch"], mid["sampler"]["start"]) == (0, 3, 12)


def test_second_ctrl_c_stops_at_once(work: Path) -> None:
    proc = _train_in_own_group(work, "--run-name", "twice", "--set", "loader.num_workers=1",
                               env={"FASTTRAIN_TEST_SIGNAL_AT_STEP": "3", "FASTTRAIN_TEST_SIGNALS": "INT,INT",
                                    "FASTTRAIN_TEST_SIGNAL_GROUP": "1"})
    assert proc.returncode == 130, proc.stderr
    assert "fasttrain: interrupted: stopped at once" in proc.stderr and "no checkpoint was written yet" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (work / "runs" / "twice" / "last.pt").exists()  # stopped before any checkpoint, none half-written
    assert not list((work / "runs" / "twice").glob(".*.tmp"))


def test_sigkill_while_saving_keeps_the_previous_checkpoint(work: Path) -> None:
    run = work / "runs" / "killed"
    full = child_env({**ENV, "FASTTRAIN_TEST_SLOW_SAVE": "120"})  # replacing last.pt waits 120 s before the rename
    child = subprocess.Popen([sys.executable, "-m", "fasttrain", "train", *BASE, "--run-name", "killed"],
                             cwd=work, env=full, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        def replacing() -> bool:  # last.pt first: a temporary file seen after it exists is the slowed second save
            return (run / "last.pt").exists() and bool(list(run.glob(".last.pt.*.tmp")))

        while not replacing() and child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        assert list(run.glob(".last.pt.*.tmp")), "the second save of last.pt never started"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    payload = ck.load(run / "last.pt")  # the epoch-1 checkpoint, whole
    assert payload["epoch"] == 1 and payload["batch_in_epoch"] == 0
    ck.load_model_state(__import__("fasttrain.models.tiny").models.tiny.tiny_cnn(num_classes=3), payload["model"],
                        run / "last.pt")
    assert list(run.glob(".last.pt.*.tmp"))  # the dead process's temporary file ...
    policies.CheckpointPolicy(run).save_last(payload)
    assert not list(run.glob(".*.tmp"))      # ... is pruned after the next good save


def test_truncated_checkpoint_names_the_file_and_the_previous_good_one(work: Path, reference: Path, cli,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    run = work / "runs" / "damaged"
    shutil.copytree(reference, run)
    data = (run / "last.pt").read_bytes()
    (run / "last.pt").write_bytes(data[: len(data) // 2])
    monkeypatch.chdir(work)
    res = cli("train", "--resume", str(run))
    assert res.code == 2, res.err
    assert str(run / "last.pt") in res.err and "truncated" in res.err
    assert "previous good checkpoint is" in res.err and "Traceback" not in res.err
    previous = re.search(r"previous good checkpoint is (\S+)", res.err).group(1)  # type: ignore[union-attr]
    assert Path(previous).name in {"best.pt", "epoch_0002.pt", "epoch_0001.pt"}
    ck.load(Path(previous))  # and it really loads
    # auto skips the damaged file and takes the good one (that run is finished: it says so, exit 2)
    res = cli("train", "--resume", "auto", "--runs-dir", str(work / "runs"), "--run-name", "damaged")
    assert res.code == 2 and "skipped damaged checkpoint" in res.err and "already finished epoch 2 of 2" in res.err


def test_a_model_that_does_not_fit_is_refused(work: Path, reference: Path, cli,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(REPO / "tests"))
    res = cli("train", "--resume", str(reference / "epoch_0001.pt"), "--model", "fault_models:other_net",
              "--quiet")
    assert res.code == 2, res.err
    assert str(reference / "epoch_0001.pt") in res.err and "does not fit this model" in res.err


def test_resume_from_an_epoch_end_checkpoint_matches_too(work: Path, reference: Path, cli,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    run = work / "runs" / "from_epoch1"
    run.mkdir(parents=True)
    shutil.copy2(reference / "epoch_0001.pt", run / "epoch_0001.pt")
    monkeypatch.chdir(work)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the reference ran on one thread; so does this process now
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        res = cli("train", "--resume", str(run), "--json")
    finally:
        torch.set_num_threads(threads)
    assert res.code == 0, res.err
    assert json.loads(res.out)["history"][1]["train_images"] == 24  # the whole second epoch was trained
    _assert_same_tensors(ck.load(reference / "last.pt")["model"], ck.load(run / "last.pt")["model"], "model")
