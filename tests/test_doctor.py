"""Every doctor rule against the recorded reports in tests/fixtures/reports/: the right status, the numbers
in the detail, and a fix that names the knob to turn."""
from __future__ import annotations

from pathlib import Path

import pytest

from fasttrain.doctor import checks as doctor
from fasttrain.doctor.findings import Finding
from fasttrain.hardware.report import DiskInfo, GpuInfo, HardwareReport, MemoryInfo
from fasttrain.profiles import presets
from fasttrain.profiles.files import preset_names

REPORTS = Path(__file__).parent / "fixtures" / "reports"
ALL = sorted(p.stem for p in REPORTS.glob("*.json"))


def load(name: str) -> HardwareReport:
    return HardwareReport.model_validate_json((REPORTS / f"{name}.json").read_text())


def profile(ref: str, *sets: str):
    return presets.resolve(ref, sets=list(sets), env={}).profile


def find(findings: list[Finding], rule_id: str) -> Finding:
    hits = [f for f in findings if f.id == rule_id]
    assert hits, f"no {rule_id} finding in {[f.id for f in findings]}"
    return hits[0]


def check(
    name: str, prof=None, target: float | None = None, report: HardwareReport | None = None
) -> dict[str, Finding]:
    findings = doctor.run_rules(report or load(name), prof, target)
    return {f.id: f for f in findings}


def test_fixtures_exist_for_every_machine_the_issue_names() -> None:
    assert {
        "t4_kaggle",
        "rtx4060_laptop",
        "v100_16",
        "v100_32",
        "a10g",
        "cpu_only",
        "container_shm64",
        "busy_gpu",
        "throttled_gpu",
        "gpu_with_cpu_torch",
        "pcie_low",
    } <= set(ALL)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("preset", preset_names())
def test_no_rule_crashes_on_any_report_and_preset(name: str, preset: str) -> None:
    findings = doctor.run_rules(load(name), profile(preset))
    assert findings
    assert {f.status for f in findings} <= {"ok", "warn", "fail"}
    assert len({f.id for f in findings}) == len(findings)  # one finding per rule
    for f in findings:
        assert f.title
        assert f.status == "ok" or f.fix, f"{f.id} {f.status} without a fix"


def test_findings_come_in_rules_order() -> None:
    ids = [f.id for f in doctor.run_rules(load("pcie_low"), profile("aws-a10g"))]
    assert ids[:6] == ["torch", "gpu", "torch-cuda", "gpu-busy", "throttling", "pcie"]
    assert ids.index("workers") < ids.index("loader-ram") < ids.index("shm") < ids.index("env")


def test_rules_survive_a_report_with_almost_nothing_in_it() -> None:
    bare = HardwareReport(
        memory=MemoryInfo(ram_total_bytes=2**30, ram_available_bytes=2**29),
        gpus=[GpuInfo(index=0, name="Mystery GPU", memory_total_bytes=0)],
    )
    for prof in (None, profile("aws-a10g")):
        assert doctor.run_rules(bare, prof)


def test_no_gpu_is_a_warning_on_a_cpu_machine() -> None:
    f = check("cpu_only", profile("cpu"))["gpu"]
    assert f.status == "warn"
    assert "fp32" in f.detail and "AMP off" in f.detail and "slow-down" in f.detail
    assert doctor.worst_status(list(check("cpu_only", profile("cpu")).values())) == "warn"


def test_gpu_profile_on_a_cpu_machine_fails() -> None:
    f = check("cpu_only", profile("aws-a10g"))["gpu"]
    assert f.status == "fail" and "--profile cpu" in f.fix


def test_nvidia_gpu_with_cpu_only_torch() -> None:
    found = check("gpu_with_cpu_torch", profile("cpu"))
    f = found["torch-cuda"]
    assert f.status == "fail" and "CPU-only build" in f.title
    assert "--index-url https://download.pytorch.org/whl/cu" in f.fix and "12.4" in f.fix
    assert found["gpu"].status == "fail"


def test_driver_too_old_for_the_torch_build() -> None:
    f = check("old_driver")["torch-cuda"]
    assert f.status == "fail" and "too old" in f.title
    assert "12.4" in f.detail and "11.4" in f.detail and "driver" in f.fix


def test_cuda_visible_devices_hiding_every_gpu() -> None:
    report = load("old_driver").model_copy(update={"env": {"CUDA_VISIBLE_DEVICES": ""}})
    f = check("", report=report)["torch-cuda"]
    assert f.status == "fail" and "CUDA_VISIBLE_DEVICES" in f.fix


def test_usable_gpu_is_ok() -> None:
    found = check("a10g", profile("aws-a10g"))
    assert found["gpu"].status == "ok" and "NVIDIA A10G" in found["gpu"].title
    assert found["torch-cuda"].status == "ok" and "535.161.07" in found["torch-cuda"].title
    assert doctor.worst_status(list(found.values())) == "ok"


def test_busy_gpu_memory_held_by_other_processes() -> None:
    f = check("busy_gpu")["gpu-busy"]
    assert f.status == "fail"  # 31 of 40 GiB used: less than half free
    assert "pid 48211" in f.detail and "30.0 GiB" in f.detail and "97" in f.detail
    assert "CUDA_VISIBLE_DEVICES" in f.fix and "loader.batch_size" in f.fix


def test_gpu_memory_used_without_listed_processes_warns() -> None:
    """In a container NVML lists no processes of other containers, but the memory shows as used."""
    report = load("a10g")
    gpu = report.gpus[0].model_copy(
        update={"memory_used_bytes": 6 * 2**30, "memory_free_bytes": report.gpus[0].memory_total_bytes - 6 * 2**30}
    )
    f = check("", report=report.model_copy(update={"gpus": [gpu]}))["gpu-busy"]
    assert f.status == "warn" and "another container" in f.detail


def test_idle_gpu_with_a_display_server_is_not_busy() -> None:
    assert check("rtx4060_laptop")["gpu-busy"].status == "ok"  # Xorg 4 MiB, gnome-shell 2 MiB


def test_thermal_and_power_throttling_fails() -> None:
    f = check("throttled_gpu")["throttling"]
    assert f.status == "fail"
    assert "hw_thermal_slowdown" in f.detail and "1095 of 2100 MHz" in f.detail and "91" in f.detail
    assert "nvidia-smi -pl" in f.fix and "fans" in f.fix


def test_power_cap_at_full_clocks_is_normal() -> None:
    f = check("busy_gpu")["throttling"]  # sw_power_cap at 1410 of 1410 MHz under load
    assert f.status == "ok" and "normal" in f.detail


def test_power_cap_with_low_clocks_warns() -> None:
    report = load("busy_gpu")
    gpu = report.gpus[0].model_copy(update={"sm_clock_mhz": 900})
    f = check("", report=report.model_copy(update={"gpus": [gpu]}))["throttling"]
    assert f.status == "warn" and "power limit" in f.fix


def test_software_thermal_slowdown_alone_warns() -> None:
    report = load("a10g")
    gpu = report.gpus[0].model_copy(update={"throttle_reasons": ["sw_thermal_slowdown"], "temperature_c": 84})
    assert check("", report=report.model_copy(update={"gpus": [gpu]}))["throttling"].status == "warn"


def test_pcie_link_below_max() -> None:
    f = check("pcie_low")["pcie"]
    assert f.status == "warn"
    assert "x4 of x16" in f.detail and "gen 3 of 4 under load" in f.detail
    assert "x16 slot" in f.fix and "pin_memory" in f.fix


def test_idle_gpu_at_a_lower_pcie_generation_is_fine() -> None:
    f = check("t4_kaggle")["pcie"]  # gen 1 of 3 at idle: power saving
    assert f.status == "ok" and "idle" in f.detail


def test_laptop_gpu_on_its_native_x8_link_is_fine() -> None:
    assert check("rtx4060_laptop")["pcie"].status == "ok"


def test_shm_64mb_container_fails_with_the_numbers() -> None:
    f = check("container_shm64", profile("kaggle-t4"))["shm"]
    assert f.status == "fail" and "bus error" in f.detail
    # 2 workers x 2 prefetch + 1 = 5 batches of 256 x 3 x 224 x 224 x 4 B = 147 MiB -> 735 MiB vs 64 MiB
    assert "147 MiB" in f.detail and "735 MiB" in f.detail and "64 MiB" in f.detail
    assert "--shm-size=2g" in f.fix and "loader.num_workers=0" in f.fix


def test_shm_nearly_full_warns_and_roomy_is_ok() -> None:
    report = load("a10g")  # aws-a10g: 12 x 3 + 1 = 37 batches of 147 MiB = 5.3 GiB
    tight = report.model_copy(update={"memory": report.memory.model_copy(update={"shm_free_bytes": 8 * 2**30})})
    f = check("", profile("aws-a10g"), report=tight)["shm"]
    assert f.status == "warn" and "loader.num_workers=" in f.fix
    assert check("a10g", profile("aws-a10g"))["shm"].status == "ok"


def test_no_workers_need_no_shm() -> None:
    prof = profile(
        "kaggle-t4", "loader.num_workers=0", "loader.prefetch_factor=null", "loader.persistent_workers=false"
    )
    assert check("container_shm64", prof)["shm"].status == "ok"


def test_loader_ram_over_what_the_machine_has_fails() -> None:
    # The aggressive A10G note: 32 workers x prefetch 8 x 230 MiB = 57.4 GiB; a Kaggle box has 27.9 GiB free.
    prof = profile("aws-a10g", "loader.num_workers=32", "loader.prefetch_factor=8", "hardware.ram_budget_fraction=1.0")
    f = check("t4_kaggle", prof)["loader-ram"]
    assert f.status == "fail" and "57.4 GiB" in f.detail and "out of memory" in f.detail
    assert "loader.num_workers=15" in f.fix  # 15 x 8 x 230 MiB = 26.9 GiB fits the 27.9 GiB free


def test_loader_ram_over_budget_warns() -> None:
    prof = profile("aws-a10g", "loader.prefetch_factor=6")  # 12 x 6 x 230 MiB = 16.2 GiB > 14.7 GiB budget
    f = check("t4_kaggle", prof)["loader-ram"]
    assert f.status == "warn" and "budget" in f.title and "loader.num_workers=" in f.fix
    assert check("a10g", profile("aws-a10g"))["loader-ram"].status == "ok"


def test_workers_above_the_core_count() -> None:
    f = check("t4_kaggle", profile("aws-a10g"))["workers"]  # 12 workers, 4 cores
    assert f.status == "warn" and "12" in f.detail and "4 usable cores" in f.detail
    assert "loader.num_workers=3" in f.fix
    assert check("a10g", profile("aws-a10g"))["workers"].status == "ok"


def test_bf16_asked_on_a_gpu_without_it() -> None:
    prof = profile("aws-a10g", "speed.precision=bf16-mixed")
    f = check("t4_kaggle", prof)["bf16"]
    assert f.status == "warn" and "7.5" in f.title and "speed.precision=fp16-mixed" in f.fix
    assert check("a10g", prof)["bf16"].status == "ok"
    assert "bf16" not in check("a10g", profile("aws-a10g"))  # fp16 asked: rule does not apply


def test_bf16_on_a_cpu_without_avx512_bf16() -> None:
    f = check("cpu_only", profile("cpu", "speed.precision=bf16-mixed"))["bf16"]
    assert f.status == "warn" and "speed.precision=fp32" in f.fix


def test_compile_asked_where_it_cannot_work() -> None:
    report = load("a10g")
    broken = report.model_copy(
        update={
            "torch": report.torch.model_copy(update={"compile_ok": False, "compile_reason": "triton is not installed"})
        }
    )
    f = check("", profile("aws-a10g"), report=broken)["compile"]
    assert f.status == "warn" and "triton" in f.detail and "speed.compile=false" in f.fix


def test_profile_written_for_a_bigger_gpu() -> None:
    f = check("rtx4060_laptop", profile("aws-a10g"))["profile-machine"]
    assert f.status == "warn" and "23 GiB" in f.detail and "8.0 GiB" in f.detail
    assert "loader.batch_size=" in f.fix
    assert check("t4_kaggle", profile("kaggle-t4"))["profile-machine"].status == "ok"


def _with_data(name: str, files_per_s: float, files: int = 200, avg_bytes: int = 110_000) -> HardwareReport:
    report = load(name)
    disk = DiskInfo(
        path="/data/imagenet",
        role="data",
        sample_files=files,
        sample_bytes=files * avg_bytes,
        sample_seconds=files / files_per_s,
        files_per_s=files_per_s,
        read_mb_per_s=files_per_s * avg_bytes / 1e6,
        cold_cache=True,
    )
    return report.model_copy(update={"disks": [*report.disks, disk]})


def test_data_disk_too_slow_for_the_target() -> None:
    report = _with_data("a10g", files_per_s=150)  # 12 workers x 150 = 1,800 files/s at best
    fail = check("", profile("aws-a10g"), target=2500, report=report)["data-disk"]
    assert fail.status == "fail" and "2,500 images/s" in fail.detail and "1,800" in fail.detail
    assert "local NVMe" in fail.fix
    warn = check("", profile("aws-a10g"), target=1000, report=report)["data-disk"]
    assert warn.status == "warn" and "12 workers" in warn.detail
    assert check("", profile("aws-a10g"), target=100, report=report)["data-disk"].status == "ok"


def test_data_disk_without_a_target_reports_and_says_how_to_check() -> None:
    f = check("", profile("aws-a10g"), report=_with_data("a10g", files_per_s=150))["data-disk"]
    assert f.status == "ok" and "150 files/s" in f.detail and "--target-images-per-s" in f.fix


def test_data_disk_target_falls_back_to_the_published_rate_of_the_gpu() -> None:
    target, source = doctor.feed_target(load("v100_16"), profile("gcp-v100"), None)
    assert target == 1200 and "feed_targets.csv" in source
    f = check("", profile("gcp-v100"), report=_with_data("v100_16", files_per_s=100))["data-disk"]
    assert f.status == "fail" and "1,200 images/s" in f.detail  # 8 workers x 100 < 1,200
    assert doctor.feed_target(load("cpu_only"), profile("cpu"), None) == (None, "")
    assert doctor.feed_target(load("cpu_only"), profile("cpu"), 50.0)[0] == 50.0


def test_little_free_disk_warns() -> None:
    report = load("a10g")
    cwd = report.disks[0].model_copy(update={"free_bytes": 2 * 2**30})
    f = check("", report=report.model_copy(update={"disks": [cwd]}))["disk-free"]
    assert f.status == "warn" and "2.0 GiB" in f.detail


def test_environment_that_slows_training() -> None:
    f = check("old_driver")["env"]
    assert f.status == "warn"
    assert "unset CUDA_LAUNCH_BLOCKING" in f.fix and "OMP_NUM_THREADS=28" in f.fix
    assert check("t4_kaggle")["env"].status == "ok"
