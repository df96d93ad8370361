"""Issue 24, finding 6: the plan described the first NVML GPU torch can see, not torch's device 0. NVML numbers
GPUs in PCI order; torch numbers them after CUDA_VISIBLE_DEVICES (here "1,0") and, by default, fastest first. On
a recorded workstation with a T4 (NVML 0) and an A10G (NVML 1) under CUDA_VISIBLE_DEVICES=1,0, torch trains on
the A10G: bf16 and TF32 must be planned for it, not refused for the T4. Matched by UUID."""
from __future__ import annotations

from pathlib import Path

from fasttrain.hardware.report import HardwareReport
from fasttrain.plan import make_plan
from fasttrain.profiles import presets

REPORTS = Path(__file__).parent / "fixtures" / "reports"


def load(name: str) -> HardwareReport:
    return HardwareReport.model_validate_json((REPORTS / f"{name}.json").read_text())


def test_the_training_gpu_is_torchs_device_zero_matched_by_uuid() -> None:
    report = load("t4_a10g_visible_1_0")
    assert [g.name for g in report.gpus] == ["Tesla T4", "NVIDIA A10G"]  # NVML's order
    assert report.training_gpu().name == "NVIDIA A10G"


def test_the_plan_is_made_for_that_gpu() -> None:
    profile = presets.resolve("aws-a10g", sets=["speed.precision=bf16-mixed", "speed.tf32=true"], env={}).profile
    plan = make_plan(profile, load("t4_a10g_visible_1_0"))
    assert plan.device_reason == "NVIDIA A10G"
    assert plan.precision == "bf16-mixed" and plan.tf32  # the T4 has neither: planned for the wrong card before


def test_a_worker_on_its_own_gpu_plans_for_that_one() -> None:
    report = load("t4_a10g_visible_1_0")
    worker = report.model_copy(update={"torch": report.torch.model_copy(update={"current_device": 1})})
    assert worker.training_gpu().name == "Tesla T4"


def test_a_report_without_torchs_devices_keeps_the_first_visible_gpu() -> None:
    report = load("t4_a10g_visible_1_0")
    old = report.model_copy(update={"torch": report.torch.model_copy(update={"devices": []})})
    assert old.training_gpu().name == "Tesla T4"


def test_the_torch_child_records_its_devices_and_current_device(monkeypatch) -> None:
    from fasttrain.hardware.torch_build import merge_child, static_info
    seen = {"version": "2.14.1+cu130", "cuda_available": True, "device_count": 1, "current_device": 0,
            "devices": [{"index": 0, "name": "NVIDIA A10G", "uuid": "GPU-x", "total_memory": 1, "capability": "8.6"}]}
    info = merge_child(static_info(), seen, None)
    assert info.devices[0].uuid == "GPU-x" and info.current_device == 0
