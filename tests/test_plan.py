"""The Plan: a profile resolved against recorded machines -- what actually runs, and why, for each fallback."""
from __future__ import annotations

import json

import pytest
from conftest import FIXTURES

from fasttrain.hardware.report import HardwareReport
from fasttrain.plan import make_plan
from fasttrain.profiles import presets


def report(name: str, **torch_fields: object) -> HardwareReport:
    r = HardwareReport.model_validate(json.loads((FIXTURES / "reports" / f"{name}.json").read_text()))
    if torch_fields:
        r = r.model_copy(update={"torch": r.torch.model_copy(update=torch_fields)})
    return r


def profile(ref: str, *sets: str):
    return presets.resolve(ref, env={}, sets=list(sets)).profile


def test_a10g_preset_on_its_own_machine_runs_as_asked() -> None:
    plan = make_plan(profile("aws-a10g"), report("a10g"), dataset_size=1_281_167)
    assert plan.device == "cuda" and plan.precision == "fp16-mixed" and plan.precision_reason == "asked"
    assert plan.tf32 and plan.cudnn_benchmark and plan.pin_memory and plan.compile
    assert plan.workers == 12 and plan.workers_reason == "asked"
    assert plan.effective_batch == 256 and plan.scaled_lr == pytest.approx(0.5)
    assert plan.iterations_per_epoch == 5004


def test_bf16_on_a_t4_falls_back_to_fp16_with_the_reason() -> None:
    plan = make_plan(profile("aws-a10g"), report("t4_kaggle"))
    assert plan.device == "cuda"
    assert profile("aws-a10g", "speed.precision=bf16-mixed").speed.precision == "bf16-mixed"
    plan = make_plan(profile("aws-a10g", "speed.precision=bf16-mixed"), report("t4_kaggle"))
    assert plan.precision == "fp16-mixed" and "no bf16" in plan.precision_reason
    assert not plan.tf32 and any("TF32 off" in n for n in plan.notes)


def test_gpu_profile_on_a_cpu_machine_falls_back_and_says_why() -> None:
    plan = make_plan(profile("kaggle-t4"), report("cpu_only"))
    assert plan.device == "cpu" and "no CUDA GPU" in plan.device_reason
    assert plan.precision == "fp32" and "GradScaler is CUDA-only" in plan.precision_reason
    assert not plan.pin_memory and not plan.cudnn_benchmark
    assert plan.fused_optimizer  # fused kernels exist for the CPU too


@pytest.mark.parametrize("fast", [True, False, None])
def test_bf16_on_a_cpu_runs_as_asked_and_warns_without_bf16_instructions(fast: bool | None) -> None:
    plan = make_plan(profile("cpu", "speed.precision=bf16-mixed"), report("cpu_only", cpu_bf16_fast=fast))
    assert plan.precision == "bf16-mixed"
    assert ("slower than fp32" in plan.precision_reason) is (fast is False)


def test_nvidia_gpu_with_cpu_only_torch_trains_on_the_cpu() -> None:
    plan = make_plan(profile("kaggle-t4"), report("gpu_with_cpu_torch"))
    assert plan.device == "cpu" and "CPU-only build" in plan.device_reason


def test_workers_capped_by_cores_then_by_the_ram_budget() -> None:
    small = report("t4_kaggle")  # 4 cores
    plan = make_plan(profile("aws-a10g"), small)
    assert plan.workers_requested == 12 and plan.workers <= small.cores
    assert "cores" in plan.workers_reason
    # A profile written for a 256 GB host asks 4 workers x prefetch 10 x 448 MiB batches = 17.5 GiB: over the
    # 14.5 GiB budget of this 29 GB machine, so the plan drops workers until the loaders fit.
    plan = make_plan(profile("kaggle-t4", "hardware.host_ram_gb=256", "loader.num_workers=4",
                             "loader.prefetch_factor=10", "loader.batch_size=512"), small)
    assert plan.loader_ram_bytes <= plan.ram_budget_bytes
    assert plan.workers < 4 and "budget" in plan.workers_reason


def test_compile_off_where_it_cannot_work() -> None:
    plan = make_plan(profile("aws-a10g"), report("a10g", compile_ok=False, compile_reason="no C compiler"))
    assert not plan.compile and "no C compiler" in plan.compile_reason


def test_persistent_workers_and_prefetch_off_without_workers() -> None:
    plan = make_plan(profile("cpu", "loader.num_workers=0", "loader.prefetch_factor=null",
                             "loader.persistent_workers=false"), report("cpu_only"))
    assert plan.workers == 0 and plan.prefetch_factor is None and not plan.persistent_workers


def test_the_gpu_tests_expect_tf32_only_where_the_plan_gives_it() -> None:
    """Issue 24, finding 17: tests/test_gpu_precision.py asserted TF32 on whatever the GPU, which fails on a T4 or
    a V100; its expectation (gpu_helpers.tf32_expected) is the plan's own on the recorded machines."""
    from gpu_helpers import tf32_expected
    asked = presets.resolve("kaggle-t4", sets=["speed.tf32=true"], env={}).profile
    for name, major in (("t4_kaggle", 7), ("v100_16", 7), ("a10g", 8)):
        assert make_plan(asked, report(name)).tf32 is tf32_expected(major), name
