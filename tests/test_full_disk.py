"""A real full file system: a tiny training into a small tmpfs (`--runs-dir` there, the data outside).

tiny_cnn's last.pt (weights and AdamW state) is about 2.9 MiB, its best.pt (weights only) about 1 MiB. On 6 MiB,
epoch 1's last.pt and best.pt fit and epoch 2's last.pt (written beside the old one, then renamed) does not; on 3 MiB
filled up to its last few KiB, nothing of the run fits: profile.yaml,
metrics.jsonl, TensorBoard, every checkpoint and summary.json all meet ENOSPC (torch reports it as
`RuntimeError: [enforce fail at inline_container.cc] . unexpected pos ...`). Either run must end as documented:
exit 0, a warning line, no traceback, no temporary file, the previous checkpoint loadable.
Needs root to mount a tmpfs; skipped elsewhere.
"""
from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import run_subprocess
from loop_helpers import DETERMINISTIC_PROFILE, write_image_folder

from fasttrain.train.state import checkpoint as ck

ENV = {"OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fulldisk")
    write_image_folder(root / "data")
    (root / "tiny.yaml").write_text(DETERMINISTIC_PROFILE.replace("epochs: 2", "epochs: 3"))
    return root


def _mount(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    if os.geteuid() != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.fixture
def disk6(tmp_path: Path) -> Iterator[Path]:
    yield from _mount(tmp_path / "disk6", "6m")


@pytest.fixture
def disk3(tmp_path: Path) -> Iterator[Path]:
    yield from _mount(tmp_path / "disk3", "3m")


def _train(work: Path, runs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_subprocess("train", "--profile", "tiny.yaml", "--data", "data", "--model", "tiny_cnn",
                          "--runs-dir", str(runs), "--run-name", "r", "--json", *args, env=ENV, cwd=work, timeout=240)


def test_second_checkpoint_does_not_fit_on_6_mib(work: Path, disk6: Path) -> None:
    proc = _train(work, disk6)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "enforce fail" not in proc.stderr
    run = disk6 / "r"
    assert f"warning: could not save checkpoint {run / 'last.pt'}: the disk is full" in proc.stderr
    assert "the previous last.pt is kept" in proc.stderr
    assert ck.load(run / "last.pt", complete=True)["epoch"] == 1  # epoch 1's, whole and verified
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]
    summary = json.loads(proc.stdout)
    assert summary["epochs_run"] == 3 and summary["checkpoint_errors"]
    assert json.loads((run / "summary.json").read_text())["epochs_run"] == 3


def test_nothing_fits_on_a_full_3_mib_disk_and_the_run_still_ends_cleanly(work: Path, disk3: Path) -> None:
    filler = disk3 / "filler"
    with open(filler, "wb") as fh:  # leave ~4 KiB: enough for the folder, not for the run's files
        fh.write(b"\0" * (os.statvfs(disk3).f_bavail * os.statvfs(disk3).f_frsize - 4 * 1024))
    proc = _train(work, disk3, "--epochs", "2")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "enforce fail" not in proc.stderr, proc.stderr
    run = disk3 / "r"
    assert f"warning: could not save checkpoint {run / 'last.pt'}: the disk is full" in proc.stderr
    assert "no last.pt was written before" in proc.stderr
    warned = [line for line in proc.stderr.splitlines() if "warning: could not write" in line]
    assert len(warned) == len(set(warned)) and warned, proc.stderr  # once per file
    assert any("summary.json" in line for line in warned) or (run / "summary.json").is_file()
    assert json.loads(proc.stdout)["epochs_run"] == 2  # the summary still reaches --json
    assert not [p for p in run.rglob("*") if p.name.endswith(".tmp")]
