"""CUDA: what the doctor and the estimate say about the GPU at hand (marker `gpu`).

- `doctor --json` lists the GPU torch trains on, with NVML's driver, memory and readings;
- benchmarks/record_gpu_report.py records that report as a fixture that `doctor --report-from` accepts;
- `estimate --measure` forecasts a ResNet-50 step on this GPU within 1.5x of the step it measures.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, child_env
from gpu_helpers import finite, release_cuda, write_profile

pytestmark = pytest.mark.gpu


def test_doctor_json_lists_the_gpu_with_driver_and_memory(cli) -> None:
    import torch
    res = cli("doctor", "--json")
    assert res.code in (0, 1), res.err  # 1: some finding failed (e.g. a busy GPU); the report is whole either way
    data = json.loads(res.out)
    report = data["report"]
    assert report["nvml_available"] is True, report.get("nvml_error")
    assert report["driver_version"], report
    assert report["torch"]["cuda_available"] is True and report["torch"]["device_count"] >= 1
    assert report["torch"]["cuda_version"] and report["torch"]["cpu_only_build"] is False
    gpu = report["gpus"][0]
    props = torch.cuda.get_device_properties(0)
    assert gpu["name"] == torch.cuda.get_device_name(0), (gpu["name"], torch.cuda.get_device_name(0))
    assert gpu["visible_to_torch"] is True
    assert gpu["compute_capability"] == f"{props.major}.{props.minor}"
    # NVML counts all of the card's memory, torch what CUDA may use: within a few percent of each other.
    assert gpu["memory_total_bytes"] == pytest.approx(props.total_memory, rel=0.05)
    assert gpu["memory_free_bytes"] is not None and 0 < gpu["memory_free_bytes"] <= gpu["memory_total_bytes"]
    for key in ("utilization_pct", "temperature_c", "power_draw_w", "sm_clock_max_mhz"):
        assert finite(gpu[key]), (key, gpu)
    assert gpu["bf16_supported"] is (props.major >= 8) and gpu["tf32_supported"] is (props.major >= 8)


def test_record_gpu_report_writes_a_fixture_doctor_accepts(cli, tmp_path: Path) -> None:
    out = tmp_path / "this_gpu.json"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "record_gpu_report.py"), "--out", str(out)],
                          capture_output=True, text=True, env=child_env(), cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr
    recorded = json.loads(out.read_text())
    assert recorded["gpus"] and recorded["torch"]["cuda_available"] is True and "report" not in recorded
    res = cli("doctor", "--report-from", str(out), "--json")
    assert res.code in (0, 1), res.err
    again = json.loads(res.out)
    assert again["report"]["gpus"][0]["name"] == recorded["gpus"][0]["name"]
    plan = cli("train", "--dry-run", "--json", "--data", "synthetic")
    assert plan.code == 0, plan.err
    assert json.loads(plan.out)["plan"]["device"] == "cuda"


@pytest.mark.timeout(900)
def test_estimate_forecasts_the_measured_step_within_one_and_a_half_times(cli, tmp_path: Path) -> None:
    import torch

    from fasttrain.hardware.gpus import find_gpu
    name = torch.cuda.get_device_name(0)
    if find_gpu(name) is None:
        pytest.skip(f"src/fasttrain/data/gpus.csv has no spec for {name!r}: nothing to forecast with")
    # Compute-bound enough for the roofline to speak: ResNet-50, 224 px, batch 128, fp16, channels_last, eager.
    profile = write_profile(tmp_path / "gpu.yaml", loader={"batch_size": 128, "image_size": 224, "num_workers": 0,
                                                           "prefetch_factor": None})
    try:
        res = cli("estimate", "--model", "resnet50", "--profile", str(profile), "--measure", "--measure-steps", "20",
                  "--json")
    finally:
        release_cuda()
    assert res.code == 0, res.err[-3000:]
    measure = json.loads(res.out)["measure"]
    forecast, measured = measure["forecast"]["images_per_s"], measure["measured"]["images_per_s"]
    assert finite(forecast) and finite(measured) and measured > 0, measure
    ratio = forecast / measured
    assert 1 / 1.5 <= ratio <= 1.5, (f"forecast {forecast:.0f} images/s vs measured {measured:.0f} on {name} "
                                     f"(ratio {ratio:.2f}); memory forecast {measure['forecast']['peak_memory_bytes']}"
                                     f" vs measured {measure['measured']['peak_memory_bytes']}")
