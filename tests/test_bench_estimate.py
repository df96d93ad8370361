"""Plumbing of benchmarks/estimate_accuracy.py and calibrate.py (their numbers are checked by running them)."""
from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def accuracy():
    sys.path.insert(0, str(BENCH))
    try:
        yield importlib.import_module("estimate_accuracy")
    finally:
        sys.path.remove(str(BENCH))


def test_reference_rows_parse_every_published_row(accuracy) -> None:
    rows = accuracy.calibrate.reference_rows()
    assert len(rows) == 108 and all(r.source for r in rows)
    r50 = [r for r in rows if r.model == "resnet50" and r.gpu.startswith("RTX 3090")]
    assert {r.channels_last for r in r50} == {True, False}
    assert any(r.tf32 for r in rows) and any(r.num_gpus == 8 for r in rows)
    assert {r.image_size for r in rows} == {224, 256, 288, 380}       # efficientnet_b2/b3/b4 at their sizes
    # the splits the cross-validation leaves out: several GPUs, model families and sources
    single = [r for r in rows if r.num_gpus == 1]
    assert {r.gpu_model for r in single} >= {
        "V100 SXM2",
        "A100 SXM4",
        "H100 SXM5",
        "RTX 3090",
        "RTX 4090",
        "A10 (datasheet)",
    }
    assert {r.family for r in single} >= {"resnet", "efficientnet", "mobilenet", "vit", "resnext"}
    assert {r.source_group for r in single} == {
        "DeepLearningExamples 2022",
        "DeepLearningExamples 2020",
        "timm",
        "Lambda",
    }


def test_tiny_run_prints_every_section_and_fails_loudly_only_with_reasons(accuracy, tmp_path, capsys) -> None:
    out_json = tmp_path / "acc.json"
    code = accuracy.main(["--tiny", "--json", str(out_json)])
    text = capsys.readouterr().out
    for section in ("== 1. CPU", "== 2. published GPU", "== 3. activation memory", "within 1.5x: "):
        assert section in text
    data = json.loads(out_json.read_text())
    assert len(data["reference"]) == 4 and all(r["ratio"] for r in data["reference"])
    assert data["cpu"][0]["case"] == "tiny_cnn@16 b8" and data["cpu"][0]["measured"] > 0
    assert len(data["cpu"][0]["rounds"]) == 1 and data["cpu"][0]["rounds"][0]["forecast"] > 0
    assert abs(data["activations"][0]["error"]) < 0.25
    assert code == (1 if data["failed"] else 0)
    assert ("FAILED:" in text) == bool(data["failed"])


def test_shipped_calibration_says_how_it_was_fitted() -> None:
    from fasttrain.estimate import calibration

    c = calibration.load()
    assert c["gpu_fit"]["rows"] == 100 and c["gpu_fit"]["share_within_1.5x"] >= 0.8
    assert "method" in c["cpu_fit"] and c["cpu_fit"]["fitted_on"]
    assert set(c["gpu"]["compute_efficiency"]) == {"fp32", "tf32", "amp"}
    assert all(0 < c["gpu"][k] <= 1 for k in ("memory_efficiency", "amp_memory_efficiency", "depthwise_efficiency"))


def test_measurements_last_about_the_same_time_whatever_the_model(accuracy) -> None:
    steps_for = accuracy.cpu_fit.steps_for
    assert steps_for(0.4, seconds=2.0) == 5  # a ResNet-50 step: 5 steps for 2 s
    assert steps_for(10.0) == accuracy.cpu_fit.MIN_STEPS
    assert steps_for(1e-4) == accuracy.cpu_fit.MAX_STEPS


def test_cpu_ceiling_measures_the_small_conv_cost_quickly() -> None:
    from fasttrain.estimate import cpu_ceiling

    c = cpu_ceiling.measure(1, "float32", True)
    assert c.conv_weight_s_per_byte >= 0 and c.matmul_flops > 0 and c.seconds < 3
