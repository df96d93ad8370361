"""The bottleneck verdict on real Plans (presets + HardwareReports built here) and telemetry snapshots."""
from __future__ import annotations

import pytest

from fasttrain.core import arithmetic as ar
from fasttrain.hardware.report import CpuInfo, GpuInfo, HardwareReport, MemoryInfo, TorchInfo
from fasttrain.plan import make_plan
from fasttrain.profiles import presets
from fasttrain.telemetry import verdict
from fasttrain.telemetry.recorder import Telemetry
from fasttrain.telemetry.step_record import StepRecord

GIB = 2**30


def a10g_machine(ram_gib: float = 62, cores: int = 16) -> HardwareReport:
    """An AWS g5.4xlarge as the A10G field notes describe it."""
    return HardwareReport(
        gpus=[GpuInfo(index=0, name="NVIDIA A10G", memory_total_bytes=24 * GIB, compute_capability="8.6",
                      bf16_supported=True, tf32_supported=True)],
        torch=TorchInfo(version="2.4", cuda_version="12.1", cpu_only_build=False, cuda_available=True,
                        device_count=1, compile_ok=True),
        cpu=CpuInfo(logical_cores=cores), memory=MemoryInfo(ram_total_bytes=int(ram_gib * GIB),
                                                            ram_available_bytes=int(ram_gib * GIB * 0.8)))


def t4_machine() -> HardwareReport:
    rep = a10g_machine(ram_gib=30, cores=4)
    rep.gpus[0] = GpuInfo(index=0, name="Tesla T4", memory_total_bytes=16 * GIB, compute_capability="7.5",
                          bf16_supported=False, tf32_supported=False)
    return rep


def cpu_machine(cores: int = 2) -> HardwareReport:
    return HardwareReport(cpu=CpuInfo(logical_cores=cores),
                          memory=MemoryInfo(ram_total_bytes=8 * GIB, ram_available_bytes=6 * GIB))


def plan_for(preset: str, report: HardwareReport, *sets: str):
    return make_plan(presets.resolve(preset, sets=list(sets)).profile, report, dataset_size=10_000)


def measured(wait: float, h2d: float, compute: float, steps: int = 60, **gpu: float) -> dict:
    """A real Telemetry snapshot after `steps` synthetic batches with this split (seconds per batch)."""
    clock = [0.0]
    readings = dict(gpu)

    class Gpu:
        reason = nvml_reason = None

        def read(self) -> dict:
            return readings

    tel = Telemetry("cuda" if gpu else "cpu", clock=lambda: clock[0], gpu_reader=Gpu(), host_reader=dict)
    for i in range(steps):
        clock[0] += wait + h2d + compute
        tel.record(StepRecord(0, i, i, 1000, 256, wait, h2d, compute, loss=2.0, lr=0.5))
    tel.sample_now()
    return tel.snapshot()


def test_input_bound_names_the_wait_and_the_workers_ram_allows() -> None:
    report = a10g_machine(ram_gib=8)
    plan = plan_for("aws-a10g", report, "loader.num_workers=3")
    snap = measured(wait=0.061, h2d=0.002, compute=0.037)
    v = verdict.assess(snap, plan, report)
    profile = presets.resolve("aws-a10g").profile
    ram = ar.workers_within_budget(verdict.MAX_WORKERS_CONSIDERED, 3, profile.batch_bytes, plan.ram_budget_bytes)
    assert ram == 5  # 4 GiB budget (half of 8 GiB) / (3 x 230 MiB per worker): the field note's RAM lesson
    assert v.kind == "input-bound" and v.ram_allows_workers == ram
    # 3 workers deliver one batch per step; compute needs only 39% of it -> 3 / 0.39 = 8 workers; RAM caps at 5
    assert verdict.workers_needed(3, 0.61) == 8
    assert v.suggested_workers == 5
    assert v.text == ("input-bound: 61% of each step waits for data; raise num_workers to 5 "
                      "(RAM allows 5, not the 8 that would hide the wait) (--set loader.num_workers=5)")


def test_input_bound_with_room_matches_the_issue_example() -> None:
    report = a10g_machine(ram_gib=16)
    plan = plan_for("aws-a10g", report, "loader.num_workers=3")
    v = verdict.assess(measured(wait=0.061, h2d=0.002, compute=0.037), plan, report)
    assert v.ram_allows_workers == 11 and v.cores_allow_workers == 15
    assert verdict.diagnose(measured(wait=0.061, h2d=0.002, compute=0.037), plan, report) == v.text
    assert v.text.startswith("input-bound: 61% of each step waits for data; raise num_workers to 8, RAM allows 11")


def test_the_zero_percent_gpu_story_is_input_bound() -> None:
    """aggressive-a10g-imagenet.md: 'GPU utilization: 0% most of the time' with a starved loader."""
    report = a10g_machine()
    plan = plan_for("aws-a10g", report, "loader.num_workers=2")
    snap = measured(wait=0.02, h2d=0.001, compute=0.079, gpu_util_pct=4.0, gpu_power_w=70.0)
    assert snap["data_wait_fraction"] < verdict.INPUT_BOUND_FRACTION  # only 20% wait on the host clock...
    v = verdict.assess(snap, plan, report)
    assert v.kind == "input-bound"                                      # ...but an idle GPU settles it
    assert "(GPU busy 4%)" in v.text and "raise num_workers to 3" in v.text


def test_input_bound_at_the_core_limit_says_make_batches_cheaper() -> None:
    report = cpu_machine(cores=2)
    plan = plan_for("cpu", report, "loader.num_workers=1")
    assert plan.workers == 1
    v = verdict.assess(measured(wait=0.05, h2d=0.0, compute=0.05), plan, report)
    assert v.kind == "input-bound" and v.suggested_workers == 1
    assert "num_workers=1 already uses the 2 cores" in v.text and "cheaper to load" in v.text


def test_main_process_loading_suggests_first_workers() -> None:
    report = cpu_machine(cores=8)
    plan = plan_for("cpu", report, "loader.num_workers=0", "loader.prefetch_factor=null",
                    "loader.persistent_workers=false")
    v = verdict.assess(measured(wait=0.08, h2d=0.0, compute=0.02), plan, report)
    assert verdict.workers_needed(0, 0.8) == 4  # load time 0.08 s / compute 0.02 s
    assert v.suggested_workers == 4 and "raise num_workers to 4" in v.text


def test_transfer_bound_without_pinned_memory() -> None:
    report = a10g_machine()
    plan = plan_for("aws-a10g", report, "loader.pin_memory=false")
    v = verdict.assess(measured(wait=0.005, h2d=0.03, compute=0.065), plan, report)
    assert v.kind == "transfer-bound"
    assert v.text.startswith("transfer-bound: 30% of each step copies batches to the device")
    assert "pin_memory" in v.text


def test_transfer_bound_with_pinned_memory_suggests_smaller_dtype() -> None:
    report = a10g_machine()
    plan = plan_for("aws-a10g", report)
    v = verdict.assess(measured(wait=0.005, h2d=0.03, compute=0.065), plan, report)
    assert v.kind == "transfer-bound" and "uint8" in v.text


def test_transfer_bound_on_the_cpu_is_the_layout_conversion() -> None:
    report = cpu_machine()
    plan = plan_for("cpu", report, "speed.channels_last=true")
    v = verdict.assess(measured(wait=0.001, h2d=0.03, compute=0.069), plan, report)
    assert v.kind == "transfer-bound" and "on the CPU" in v.text and "speed.channels_last=false" in v.text
    assert "pin_memory" not in v.text and "GPU" not in v.text


def test_compute_bound_with_everything_on() -> None:
    report = a10g_machine()
    plan = plan_for("aws-a10g", report)
    v = verdict.assess(measured(wait=0.001, h2d=0.002, compute=0.097, gpu_util_pct=97.0), plan, report)
    assert v.kind == "compute-bound"
    assert v.text == ("compute-bound: 97% of each step is compute, the input pipeline keeps up; "
                      "the speed settings this device supports are on -- good")


def test_compute_bound_lists_what_the_device_supports_but_the_plan_has_off() -> None:
    report = a10g_machine()
    plan = plan_for("aws-a10g", report, "speed.precision=fp32", "speed.channels_last=false",
                    "speed.compile=false", "speed.tf32=false")
    v = verdict.assess(measured(wait=0.001, h2d=0.002, compute=0.097), plan, report)
    assert v.kind == "compute-bound"
    for fix in ("speed.precision=bf16-mixed", "speed.channels_last=true", "speed.compile=true", "speed.tf32=true"):
        assert f"--set {fix}" in v.text


def test_no_bf16_on_a_t4_so_fp16_is_suggested() -> None:
    report = t4_machine()
    plan = plan_for("kaggle-t4", report, "speed.precision=fp32")
    assert verdict.untapped_speedups(plan, report)[0] == "speed.precision=fp16-mixed"


def test_cpu_suggestions_only_what_the_cpu_supports() -> None:
    report = cpu_machine()
    plan = plan_for("cpu", report, "speed.precision=fp32", "speed.compile=false")
    assert verdict.untapped_speedups(plan, report) == []  # no fast bf16, torch.compile not usable here
    report.torch.cpu_bf16_fast = True
    report.torch.compile_ok = True
    assert verdict.untapped_speedups(plan, report) == ["speed.precision=bf16-mixed", "speed.compile=true"]


def test_host_bound_when_gpu_idles_but_data_is_ready() -> None:
    report = a10g_machine()
    plan = plan_for("aws-a10g", report)
    v = verdict.assess(measured(wait=0.001, h2d=0.001, compute=0.098, gpu_util_pct=35.0), plan, report)
    assert v.kind == "host-bound" and "35%" in v.text


@pytest.mark.parametrize("steps", [0, 1, verdict.WARMUP_STEPS - 1])
def test_warming_up_before_enough_steps(steps: int) -> None:
    report = cpu_machine()
    plan = plan_for("cpu", report)
    snap = measured(wait=0.09, h2d=0.0, compute=0.01, steps=steps)
    assert verdict.diagnose(snap, plan, report).startswith(f"warming up: {steps} of {verdict.WARMUP_STEPS} steps")


def test_verdict_without_a_report_still_sizes_workers_by_ram() -> None:
    plan = plan_for("aws-a10g", a10g_machine(ram_gib=32), "loader.num_workers=3")
    v = verdict.assess(measured(wait=0.061, h2d=0.002, compute=0.037), plan, None)
    assert v.cores_allow_workers is None and v.suggested_workers == 8
