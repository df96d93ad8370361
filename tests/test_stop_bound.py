"""A stop request ends the run within one micro-step, not a whole accumulation window (issue 25, point 15).

A real run with 4 micro-batches per optimizer step, whose model sends its own process SIGTERM in the middle of a
window (the 10th forward: the 2nd micro-step of epoch 2's first window): no further micro-step runs, the
checkpoint is at the window's start, and the resumed run finishes with the uninterrupted run's loss.
benchmarks/stop_latency.py measures the seconds (docs/reliability.md)."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import run_subprocess
from loop_helpers import DETERMINISTIC_PROFILE, write_image_folder

MODEL = """
import os
import signal
import torch

class Counting(torch.nn.Module):
    '''Counts training forwards in a file; sends SIGTERM to its own process at forward STOP_AT.'''
    def __init__(self, num_classes=3):
        super().__init__()
        torch.manual_seed(0)
        self.head = torch.nn.Linear(3, num_classes)
    def forward(self, x):
        if self.training:
            path = os.environ["COUNT_FILE"]
            n = int(open(path).read() or 0) + 1 if os.path.exists(path) else 1
            open(path, "w").write(str(n))
            if n == int(os.environ.get("STOP_AT", "0")):
                os.kill(os.getpid(), signal.SIGTERM)
        return self.head(x.mean(dim=(2, 3)))

def build(num_classes=3, **kwargs):
    return Counting(num_classes)
"""


@pytest.fixture
def setup(tmp_path: Path):
    (tmp_path / "counting_model.py").write_text(textwrap.dedent(MODEL))
    data = write_image_folder(tmp_path / "data", classes=3, train_per_class=8, val_per_class=4)  # 24: 6 batches of 4
    profile = tmp_path / "p.yaml"
    profile.write_text(DETERMINISTIC_PROFILE.replace("warmup_epochs: 0", "warmup_epochs: 0\n  accumulation_steps: 4"))
    return tmp_path, data, profile


def _train(tmp_path: Path, profile: Path, data: Path, name: str, env: dict[str, str], *extra: str):
    args = ["train", "--profile", str(profile), "--data", str(data), "--model", "counting_model:build",
            "--runs-dir", str(tmp_path / "runs"), "--run-name", name, "--no-tune", "--json", *extra]
    return run_subprocess(*args, env={"PYTHONPATH": f"{tmp_path}:{Path(__file__).parents[1] / 'src'}", **env},
                          cwd=tmp_path)


def test_a_stop_inside_an_accumulation_window_ends_after_the_micro_step_in_flight(setup) -> None:
    tmp_path, data, profile = setup
    whole = _train(tmp_path, profile, data, "whole", {"COUNT_FILE": str(tmp_path / "n_whole")})
    assert whole.returncode == 0, whole.stderr[-2000:]
    # 6 batches an epoch: windows of batches 0-3 and 4-5. Forward 10 (after the 2 of the validation check that opens
    # the run and epoch 1's 6) is epoch 2's batch 1: the 2nd micro-step of a window of 4.
    stopped = _train(tmp_path, profile, data, "cut", {"COUNT_FILE": str(tmp_path / "n_cut"), "STOP_AT": "10"})
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    assert int((tmp_path / "n_cut").read_text()) == 10  # no micro-step after the one in flight (was: 12)
    summary = json.loads(stopped.stdout)
    assert summary["stopped_at"] == {"epoch": 2, "batch": 0, "step": 2}  # the open window's start, epoch 1's 2 steps
    resumed = _train(tmp_path, profile, data, "cut", {"COUNT_FILE": str(tmp_path / "n_cut")},
                     "--resume", str(tmp_path / "runs" / "cut"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    again, reference = json.loads(resumed.stdout), json.loads(whole.stdout)
    assert again["final_train_loss"] == reference["final_train_loss"]
    assert again["final_val_loss"] == reference["final_val_loss"]
