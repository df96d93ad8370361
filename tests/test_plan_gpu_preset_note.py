"""A GPU preset planned where torch has no CUDA GPU: the plan says so (train --dry-run and the run start show it)."""
from __future__ import annotations

import json
from pathlib import Path

from conftest import FIXTURES

from fasttrain.hardware.report import HardwareReport
from fasttrain.plan import gpu_preset_note, make_plan
from fasttrain.profiles import presets

NOTE = ("kaggle-t4 is for a T4 GPU and this machine has none: the plan falls back to the CPU, a large slow-down "
        "(the Kaggle note measured 12x for GPU over CPU); its 2 loader worker(s) leave the compute 2 core(s) fewer; "
        "--profile cpu plans for this machine")


def report(name: str) -> HardwareReport:
    return HardwareReport.model_validate(json.loads((FIXTURES / "reports" / f"{name}.json").read_text()))


def profile(ref: str, *sets: str):
    return presets.resolve(ref, env={}, sets=list(sets)).profile


def test_gpu_preset_on_a_machine_without_a_gpu_is_noted() -> None:
    plan = make_plan(profile("kaggle-t4"), report("cpu_only"), dataset_size=1000)
    assert plan.device == "cpu" and NOTE in plan.notes


def test_no_note_on_a_gpu_or_for_a_cpu_profile() -> None:
    assert gpu_preset_note(profile("kaggle-t4"), report("t4_kaggle"), 2) is None
    assert gpu_preset_note(profile("cpu"), report("cpu_only"), 1) is None
    assert not any("falls back to the CPU" in n for n in make_plan(profile("cpu"), report("cpu_only")).notes)


def test_gpu_present_but_unusable_and_no_workers() -> None:
    note = gpu_preset_note(profile("kaggle-t4", "loader.num_workers=0"), report("gpu_with_cpu_torch"), 0)
    assert note is not None and "kaggle-t4 is for a T4 GPU and torch cannot use this machine's" in note
    assert "loader worker" not in note


def test_train_dry_run_prints_the_note(cli, tmp_path: Path, monkeypatch) -> None:
    from PIL import Image

    from fasttrain.train.setup import prepare as gather
    monkeypatch.setattr(gather, "probe", lambda: report("cpu_only"))
    for cls in ("a", "b"):
        (tmp_path / "train" / cls).mkdir(parents=True)
        for i in range(8):
            Image.new("RGB", (16, 16), (i * 20, 0, 0)).save(tmp_path / "train" / cls / f"{i}.png")
    r = cli("train", "--dry-run", "--profile", "kaggle-t4", "--data", str(tmp_path), "--model", "tiny_cnn",
            "--set", "loader.batch_size=4", "--set", "loader.decode_once=false")  # the per-image path's workers
    assert r.code == 0, r.err
    assert NOTE in " ".join(r.out.split())
    # decoded once into RAM, the same run has no loader worker to take cores from compute
    r = cli("train", "--dry-run", "--profile", "kaggle-t4", "--data", str(tmp_path), "--model", "tiny_cnn",
            "--set", "loader.batch_size=4")
    assert r.code == 0, r.err
    out = " ".join(r.out.split())
    assert "the plan falls back to the CPU" in out and "loader worker" not in out
