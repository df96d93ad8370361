"""Checkpoint faults past truncation: flipped bytes inside a tensor, fields of the wrong type, `--resume auto`
after a `cp -r` (file times lie), two processes on one run, the rows a killed process logged after its last
checkpoint, bad test-hook values.

Real tiny_cnn runs on real image files (one uninterrupted reference run shared by the module), real checkpoint
files edited byte by byte, real child processes for the lock and the SIGKILL.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import child_env, run_subprocess
from loop_helpers import tiny_run_folder

from fasttrain.core.errors import UserError
from fasttrain.train.run.lock import RunLock
from fasttrain.train.state import checkpoint as ck
from fasttrain.train.state.resume import find_checkpoint, latest_run

ENV = {"OMP_NUM_THREADS": "1"}
BASE = ("--profile", "tiny.yaml", "--data", "data", "--model", "tiny_cnn", "--save-every", "1")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_run_folder(tmp_path_factory.mktemp("ckfaults"))  # 6 optimizer steps per epoch, 2 epochs


@pytest.fixture(scope="module")
def reference(work: Path) -> Path:
    proc = run_subprocess("train", *BASE, "--run-name", "ref", env=ENV, cwd=work, timeout=240)
    assert proc.returncode == 0, proc.stderr
    return work / "runs" / "ref"


def _copy(reference: Path, name: str) -> Path:
    run = reference.parent / name
    shutil.copytree(reference, run)
    (run / ".lock").unlink(missing_ok=True)
    return run


def _flip_inside_largest_tensor(path: Path, count: int = 16) -> str:
    """Invert `count` bytes in the middle of the largest tensor's data in torch's zip archive -> its entry name."""
    with zipfile.ZipFile(path) as zf:
        info = max((i for i in zf.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    assert info.compress_type == zipfile.ZIP_STORED
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26: info.header_offset + 30])
    start = info.header_offset + 30 + name_len + extra_len + info.file_size // 2
    for i in range(start, start + count):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    return info.filename


# -- 1. silent corruption ------------------------------------------------------------------------------------
def test_flipped_bytes_inside_a_tensor_are_refused_and_auto_skips_them(work: Path, reference: Path, cli,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    run = _copy(reference, "flipped")
    before = torch.load(run / "last.pt", weights_only=False)
    _flip_inside_largest_tensor(run / "last.pt")
    after = torch.load(run / "last.pt", weights_only=False)  # torch itself notices nothing ...
    assert any(not torch.equal(before["model"][k], after["model"][k]) for k in before["model"])  # ... but it changed
    monkeypatch.chdir(work)
    res = cli("train", "--resume", str(run))
    assert res.code == 2 and "Traceback" not in res.err, res.err
    assert f"{run / 'last.pt'}: corrupt: its content does not match its SHA-256 checksum" in res.err
    assert "the previous good checkpoint is" in res.err and "--resume " in res.err
    res = cli("train", "--resume", "auto", "--runs-dir", str(work / "runs"), "--run-name", "flipped")
    assert res.code == 2, res.err
    assert f"skipped damaged checkpoint {run / 'last.pt'}" in res.err
    assert "already finished epoch 2 of 2" in res.err and "last.pt: the run" not in res.err  # a good file was taken


def test_an_older_checkpoint_without_a_checksum_loads_with_a_note(reference: Path, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    payload = torch.load(reference / "last.pt", weights_only=False)
    del payload["checksum"]
    (tmp_path / "old").mkdir()
    torch.save(payload, tmp_path / "old" / "last.pt")
    resume, _ = find_checkpoint(str(tmp_path / "old"), tmp_path, None)
    assert ck.load(resume.path)["checksum_note"] == "no checksum" and resume.state.position.epoch == 2
    assert "has no checksum (written by an older fasttrain)" in capsys.readouterr().err


# -- 2. --resume auto ranks by what is inside the files ------------------------------------------------------
def test_auto_takes_the_furthest_checkpoint_and_run_not_the_newest_file(reference: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    for name, files in (("a", ("epoch_0001.pt", "epoch_0002.pt")), ("b", ("epoch_0001.pt",))):
        (runs / name).mkdir(parents=True)
        for f in files:
            shutil.copy(reference / f, runs / name / f)
    now = time.time()
    os.utime(runs / "a" / "epoch_0001.pt", (now, now))            # cp -r: the older checkpoint looks newest
    os.utime(runs / "a" / "epoch_0002.pt", (now - 3600, now - 3600))
    os.utime(runs / "b" / "epoch_0001.pt", (now + 60, now + 60))  # and the run that got less far, too
    resume, skipped = find_checkpoint("auto", runs, "a")
    assert resume.path.name == "epoch_0002.pt" and resume.state.position.epoch == 2 and not skipped
    assert latest_run(runs) == runs / "a"
    resume, _ = find_checkpoint("auto", runs, None)
    assert resume.path == runs / "a" / "epoch_0002.pt"
    shutil.copy(reference / "epoch_0002.pt", runs / "b" / "epoch_0002.pt")  # a tie: the later name wins
    assert latest_run(runs) == runs / "b"


# -- 3. fields of the wrong type -----------------------------------------------------------------------------
@pytest.mark.parametrize("edit, field", [
    (lambda p: p.update(epoch="one"), "'epoch'"),
    (lambda p: p.update(model=[1, 2]), "'model'"),
    (lambda p: p.pop("optimizer"), "'optimizer' is missing"),
    (lambda p: p["fit"].update(history={"a": 1}), "'fit.history'"),
    (lambda p: p.update(batch_in_epoch=-3), "'batch_in_epoch' should not be negative"),
    (lambda p: p["args"].update(epochs="two"), "'args.epochs' should be int"),
])
def test_a_checkpoint_with_fields_of_the_wrong_type_names_the_file_and_field(
        reference: Path, tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch, edit, field: str) -> None:
    payload = torch.load(reference / "last.pt", weights_only=False)
    del payload["checksum"]  # a hand-edited file: as an older fasttrain would have written it
    edit(payload)
    (tmp_path / "edited").mkdir()
    torch.save(payload, tmp_path / "edited" / "last.pt")
    monkeypatch.chdir(tmp_path)
    res = cli("train", "--resume", str(tmp_path / "edited" / "last.pt"))
    assert res.code == 2 and "Traceback" not in res.err, res.err
    assert f"{tmp_path / 'edited' / 'last.pt'}: not a usable checkpoint: field {field}" in res.err
    assert len(res.err.strip().splitlines()) <= 2


def test_a_payload_that_is_not_a_dict_is_refused(tmp_path: Path, cli) -> None:
    torch.save([1, 2, 3], tmp_path / "list.pt")
    res = cli("train", "--resume", str(tmp_path / "list.pt"))
    assert res.code == 2 and "not a fasttrain checkpoint (it holds a list, not a dict)" in res.err


# -- 4 and 5. two processes on one run; the rows a killed process logged after its checkpoint -----------------
def _steps(run: Path) -> list[int]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if r["kind"] == "step"]


def _tb_steps(run: Path) -> list[int]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(run / "tb"))
    acc.Reload()
    return [e.step for e in acc.Scalars("train/loss")]


def test_a_second_process_is_refused_and_a_killed_runs_late_rows_are_dropped_on_resume(work: Path) -> None:
    run = work / "runs" / "locked"
    slow = child_env({**ENV, "FASTTRAIN_TEST_SLOW_SAVE": "120"})  # epoch 2's last.pt waits before its rename
    child = subprocess.Popen([sys.executable, "-m", "fasttrain", "train", *BASE, "--run-name", "locked"],
                             cwd=work, env=slow, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not ((run / "last.pt").exists() and list(run.glob(".last.pt.*.tmp"))) and child.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child.poll() is None, child.stderr.read() if child.stderr else ""
        rows_before = (run / "metrics.jsonl").read_text()
        second = run_subprocess("train", "--resume", "runs/locked", env=ENV, cwd=work, timeout=240)
        assert second.returncode == 2, second.stderr
        assert second.stderr.strip() == (f"fasttrain: error: runs/locked: in use by pid {child.pid} on "
                                         f"{socket.gethostname()} since " + second.stderr.split(" since ")[1].strip())
        assert "wait for it or stop it" in second.stderr and "Traceback" not in second.stderr
        assert (run / "metrics.jsonl").read_text() == rows_before  # the refused process wrote nothing
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert _steps(run)[-1] == 12  # the killed process logged epoch 2 (steps 7-12) after its epoch-1 checkpoint
    RunLock(run).acquire().release()  # the OS dropped the dead process's lock
    resumed = run_subprocess("train", "--resume", "runs/locked", "--json", env=ENV, cwd=work, timeout=240)
    assert resumed.returncode == 0, resumed.stderr
    steps = _steps(run)
    assert steps == sorted(set(steps)) and steps[-1] == 12, steps  # each step once, in order
    epochs = [json.loads(line)["epoch"] for line in (run / "metrics.jsonl").read_text().splitlines()
              if json.loads(line)["kind"] == "epoch"]
    assert epochs == [1, 2]
    tb = _tb_steps(run)
    assert tb == sorted(set(tb)) and tb[-1] == 12, tb  # TensorBoard purged the dead process's steps 7-12
    summary = json.loads((run / "summary.json").read_text())
    assert summary["epochs_run"] == len(summary["history"]) == 2


# -- 7. test hooks -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, value", [("FASTTRAIN_TEST_SLOW_SAVE", "abc"), ("FASTTRAIN_TEST_SLOW_SAVE", "nan"),
                                         ("FASTTRAIN_TEST_SIGNAL_AT_STEP", "3x"),
                                         ("FASTTRAIN_TEST_SIGNALS", "KILL")])
def test_a_bad_test_hook_value_is_one_line_and_exit_2(work: Path, cli, monkeypatch: pytest.MonkeyPatch,
                                                      name: str, value: str) -> None:
    monkeypatch.chdir(work)
    monkeypatch.setenv(name, value)
    if name == "FASTTRAIN_TEST_SIGNALS":
        monkeypatch.setenv("FASTTRAIN_TEST_SIGNAL_AT_STEP", "3")
    res = cli("train", *BASE, "--run-name", f"hook-{name[15:]}-{value}", "--quiet")
    assert res.code == 2 and "Traceback" not in res.err and "ValueError" not in res.err, res.err
    assert res.err.strip().startswith(f"fasttrain: error: {name}:") and "(a test hook)" in res.err
    with pytest.raises(UserError):
        (ck.test_slow_save_seconds() if "SLOW" in name else __import__(
            "fasttrain.train.signals.scripted").train.signals.scripted.SignalHook.from_env())
