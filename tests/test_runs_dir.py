"""A run folder that cannot be written is refused before any data or model is loaded (exit 2, one line).

Root ignores chmod, so the read-only folder is a real read-only tmpfs mount when the tests run as root
(a chmod 0o555 folder otherwise)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import run_subprocess


@pytest.fixture
def read_only(tmp_path: Path):
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs as root here: {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_a_read_only_runs_dir_is_refused_before_any_work(cli, read_only, monkeypatch) -> None:
    from fasttrain.datasets import build

    def no_data(*args, **kwargs):
        raise AssertionError("the data was opened before the run folder was checked")
    monkeypatch.setattr(build, "build_datasets", no_data)
    res = cli("train", "--runs-dir", str(read_only / "runs"), "--run-name", "r", "--epochs", "1")
    assert res.code == 2, res.err
    line = res.err.strip()
    assert line.startswith(f"fasttrain: error: --runs-dir: cannot create or write run folders in "
                           f"{str(read_only / 'runs')!r} ("), line
    assert line.endswith("); give --runs-dir DIR, a folder you can write (or run from a writable directory)")
    assert "Traceback" not in res.err


def test_a_read_only_working_directory_names_runs_and_the_fix(read_only) -> None:
    res = run_subprocess("train", "--epochs", "1", cwd=read_only, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "--runs-dir: cannot create or write run folders in 'runs'" in res.stderr
    assert "give --runs-dir DIR" in res.stderr and "Traceback" not in res.stderr


def test_the_probe_leaves_nothing_behind(tmp_path: Path) -> None:
    from fasttrain.train.setup.args import check_runs_dir
    check_runs_dir(tmp_path / "a" / "b" / "runs")
    assert list(tmp_path.iterdir()) == []  # the folders made for the probe are gone again
    (tmp_path / "runs").mkdir()
    check_runs_dir(tmp_path / "runs")
    assert list((tmp_path / "runs").iterdir()) == []
