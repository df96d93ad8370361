"""CUDA: a checkpoint written on the GPU, then --resume, ends bit-identical to an uninterrupted run (marker `gpu`).

Real subprocesses with deterministic CUDA (tests/gpu_det_main.py: cudnn.deterministic, deterministic algorithms,
CUBLAS_WORKSPACE_CONFIG), tiny_cnn at 32 px, batch 4, no worker processes, no autotuning, no TF32. A real SIGTERM
lands right after optimizer step 8 (epoch 2 of 2, batch 2: FASTTRAIN_TEST_SIGNAL_AT_STEP); the resumed run
must end with exactly the weights, optimizer state (and, in fp16, GradScaler state) of the reference run.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, child_env
from gpu_helpers import DETERMINISTIC, checkpoint, write_profile
from loop_helpers import write_image_folder

pytestmark = pytest.mark.gpu
DET_MAIN = Path(__file__).resolve().parent / "gpu_det_main.py"
ENV = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "OMP_NUM_THREADS": "1"}


def _fasttrain(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH", "")) if p)
    full = child_env({**ENV, "PYTHONPATH": path, **(env or {})})
    return subprocess.run([sys.executable, str(DET_MAIN), *args], capture_output=True, text=True, env=full,
                          cwd=root, timeout=600)


def _same(a: object, b: object, where: str = "") -> None:
    import torch
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.mark.timeout(900)
@pytest.mark.parametrize("precision", ["fp32", "fp16-mixed"])
def test_sigterm_on_the_gpu_then_resume_is_bit_identical(tmp_path: Path, precision: str) -> None:
    write_image_folder(tmp_path / "data")  # 3 classes x 8 train images: 6 steps per epoch at batch 4
    speed = {**DETERMINISTIC["speed"], "precision": precision}
    write_profile(tmp_path / "det.yaml", loader=DETERMINISTIC["loader"], speed=speed)
    base = ("train", "--profile", "det.yaml", "--data", "data", "--model", "tiny_cnn", "--save-every", "1")

    ref = _fasttrain(tmp_path, *base, "--run-name", "ref")
    assert ref.returncode == 0, ref.stderr[-3000:]
    cut = _fasttrain(tmp_path, *base, "--run-name", "cut", env={"FASTTRAIN_TEST_SIGNAL_AT_STEP": "8"})
    assert cut.returncode == 0, cut.stderr[-3000:]
    assert "stopped by SIGTERM after optimizer step 8 (epoch 2, batch 2)" in cut.stderr, cut.stderr[-3000:]
    mid = checkpoint(tmp_path / "runs" / "cut" / "last.pt")
    assert (mid["epoch"], mid["batch_in_epoch"]) == (1, 2)
    assert mid["plan"]["device"] == "cuda" and mid["plan"]["precision"] == precision
    assert "cuda" in mid["rng"], "the CUDA generator state is saved with the checkpoint"
    assert (mid["scaler"] is not None) == (precision == "fp16-mixed")

    command = re.search(r"resume with: (.+)", cut.stderr).group(1)  # type: ignore[union-attr]
    assert command == "fasttrain train --resume runs/cut"
    resumed = _fasttrain(tmp_path, *shlex.split(command)[1:])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from runs/cut/last.pt at epoch 2, batch 2" in resumed.stdout + resumed.stderr

    a, b = checkpoint(tmp_path / "runs" / "ref" / "last.pt"), checkpoint(tmp_path / "runs" / "cut" / "last.pt")
    assert (a["epoch"], b["epoch"]) == (2, 2)
    for key in ("model", "optimizer", "scaler", "schedule", "sampler"):
        _same(a[key], b[key], key)
    assert a["fit"]["history"][1]["train_loss"] == b["fit"]["history"][1]["train_loss"]
