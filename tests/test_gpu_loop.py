"""CUDA: the loop's GPU paths through `fasttrain train` (marker `gpu`).

- pinned host memory and non-blocking copies from worker processes; the CUDA-event split of each step
  (data-wait by the host clock, host-to-device copy and compute by CUDA events) is present and positive;
- NVML and allocator readings reach the epoch rows of metrics.jsonl;
- torch.compile on CUDA: a run with --set speed.compile=true finishes, trains and did not fall back to eager.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpu_helpers import (
    all_finite,
    checkpoint,
    epoch_rows,
    finite,
    keys_like,
    release_cuda,
    step_rows,
    summary,
    write_profile,
)
from loop_helpers import write_image_folder

pytestmark = pytest.mark.gpu


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return write_image_folder(tmp_path / "data", classes=3, train_per_class=32, val_per_class=8, size=32)


@pytest.fixture(autouse=True)
def _release() -> None:
    yield
    release_cuda()


def test_pinned_memory_non_blocking_copies_and_the_cuda_event_step_split(cli, tmp_path: Path,
                                                                          folder: Path) -> None:
    profile = write_profile(tmp_path / "gpu.yaml")  # 2 workers, pin_memory
    args = ("train", "--profile", str(profile), "--data", str(folder), "--model", "resnet18")
    dry = cli(*args, "--dry-run", "--json")
    assert dry.code == 0, dry.err
    plan = json.loads(dry.out)["plan"]
    assert plan["device"] == "cuda" and plan["pin_memory"] is True and plan["workers"] == 2
    res = cli(*args, "--runs-dir", str(tmp_path / "runs"), "--run-name", "pinned", "--json", "--quiet")
    assert res.code == 0, res.err[-3000:]
    run = tmp_path / "runs" / "pinned"
    steps = step_rows(run)
    assert steps, "no step rows in metrics.jsonl"
    for row in steps:
        for key in ("data_wait_s", "h2d_s", "compute_s"):
            assert finite(row.get(key)), (key, row)
        assert row["data_wait_s"] >= 0 and row["h2d_s"] > 0 and row["compute_s"] > 0, row
        assert row["compute_s"] < 60, row  # seconds, not milliseconds: CUDA events report ms
    for row in epoch_rows(run):
        assert finite(row.get("telemetry_compute_s")) and row["telemetry_compute_s"] > 0, row
        assert finite(row.get("telemetry_data_wait_s")) and row["telemetry_data_wait_s"] > 0, row
        assert finite(row.get("telemetry_h2d_s")) and row["telemetry_h2d_s"] > 0, row
    result = summary(run)
    assert result["device"] == "cuda" and result["epochs_run"] == 2 and finite(result["train_images_per_s"])


def test_nvml_and_allocator_readings_reach_the_epoch_rows(cli, tmp_path: Path) -> None:
    # The sampler reads NVML once a second and counts a reading only while the epoch trains, so the epoch must
    # last a few seconds: ResNet-50 at 224 px in fp32 without TF32 on the 10,000 synthetic images.
    profile = write_profile(tmp_path / "gpu.yaml", loader={"batch_size": 64, "image_size": 224, "num_workers": 0,
                                                           "prefetch_factor": None},
                            speed={"precision": "fp32", "tf32": False, "channels_last": False},
                            optim={"epochs": 1})
    res = cli("train", "--profile", str(profile), "--data", "synthetic", "--model", "resnet50",
              "--runs-dir", str(tmp_path / "runs"), "--run-name", "nvml", "--json", "--quiet")
    assert res.code == 0, res.err[-3000:]
    run = tmp_path / "runs" / "nvml"
    epoch = epoch_rows(run)[-1]
    util = keys_like(epoch, "gpu", "util")
    memory = keys_like(epoch, "gpu", "mem")
    assert util and all(finite(v) and 0 <= v <= 100 for v in util.values()), epoch
    assert memory and all(finite(v) and v > 0 for v in memory.values()), epoch
    power = keys_like(epoch, "gpu", "power")
    assert not power or all(v is None or (finite(v) and v > 0) for v in power.values()), epoch
    assert summary(run)["device"] == "cuda"


@pytest.mark.timeout(900)
def test_torch_compile_on_cuda_trains(cli, tmp_path: Path, folder: Path) -> None:
    profile = write_profile(tmp_path / "gpu.yaml", loader={"num_workers": 0, "prefetch_factor": None})
    args = ("train", "--profile", str(profile), "--data", str(folder), "--model", "resnet18",
            "--set", "speed.compile=true")
    dry = cli(*args, "--dry-run", "--json")
    assert dry.code == 0, dry.err
    plan = json.loads(dry.out)["plan"]
    if not plan["compile"]:
        pytest.skip(f"the plan turned torch.compile off on this machine: {plan['compile_reason']}")
    res = cli(*args, "--runs-dir", str(tmp_path / "runs"), "--run-name", "compiled", "--save-every", "1", "--json",
              "--quiet")
    assert res.code == 0, res.err[-3000:]
    run = tmp_path / "runs" / "compiled"
    result = summary(run)
    fell_back = [n for n in result["notes"] if "torch.compile" in n and "failed" in n]
    assert not fell_back, fell_back  # it trained compiled, not on the eager fallback
    assert result["epochs_run"] == 2 and finite(result["final_train_loss"]) and finite(result["final_val_loss"])
    history = result["history"]
    assert history[-1]["train_images"] == history[0]["train_images"] > 0
    assert all_finite(checkpoint(run / "last.pt")["model"])
    # The weights moved in epoch 2: the compiled backward produced gradients the optimizer applied.
    import torch
    first, last = checkpoint(run / "epoch_0001.pt")["model"], checkpoint(run / "last.pt")["model"]
    assert any(not torch.equal(first[k], last[k]) for k in last if last[k].is_floating_point())
