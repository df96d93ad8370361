"""The probe, run for real on this machine (psutil, /proc, /dev/shm, disk, the installed torch), plus the
pure decoding helpers it uses. Nothing is mocked: where a reading depends on the machine, the test
compares it with an independent reading of the same thing."""
from __future__ import annotations

import importlib.metadata as md
import os
import shutil
from pathlib import Path

import pytest

from fasttrain.hardware import machine as hardware
from fasttrain.hardware.disk import read_throughput, sample_files
from fasttrain.hardware.nvml import cuda_version_string, decode_throttle_reasons
from fasttrain.hardware.report import GpuInfo, HardwareReport, TorchInfo
from fasttrain.hardware.torch_build import compile_support, cudnn_int, read_version_file, static_info


@pytest.fixture(scope="module")
def report() -> HardwareReport:
    return hardware.probe()


def test_probe_cpu_and_memory_are_sane(report: HardwareReport) -> None:
    assert report.cpu.logical_cores >= 1
    assert 1 <= report.cores <= report.cpu.logical_cores
    assert report.cores <= len(os.sched_getaffinity(0))
    assert report.cpu.model and report.cpu.model != ""
    assert report.memory.ram_total_bytes > 2**28
    assert 0 < report.memory.ram_available_bytes <= report.memory.ram_total_bytes
    assert report.memory.swap_total_bytes >= 0


def test_probe_reads_dev_shm(report: HardwareReport) -> None:
    if not Path("/dev/shm").exists():
        assert report.memory.shm_total_bytes is None
        return
    st = os.statvfs("/dev/shm")
    assert report.memory.shm_total_bytes == st.f_blocks * st.f_frsize
    assert 0 <= (report.memory.shm_free_bytes or 0) <= report.memory.shm_total_bytes


def test_probe_reports_free_disk_of_cwd(report: HardwareReport) -> None:
    cwd = next(d for d in report.disks if d.role == "cwd")
    assert cwd.path == str(Path.cwd())
    assert cwd.total_bytes == shutil.disk_usage(Path.cwd()).total
    assert 0 < (cwd.free_bytes or 0) <= cwd.total_bytes


def test_probe_torch_build_matches_the_installed_wheel(report: HardwareReport) -> None:
    t = report.torch
    assert t.installed
    assert t.version == md.version("torch") or t.version.startswith(md.version("torch"))
    assert t.cpu_only_build == (t.cuda_version is None)
    assert t.compile_reason  # always says why, either way
    if t.cuda_version:
        assert t.cudnn_version is None or t.cudnn_version > 8000


def test_probe_without_gpu_says_why(report: HardwareReport) -> None:
    if hardware.nvidia_device_present() or report.gpus:
        pytest.skip("this machine has an NVIDIA device: covered by the recorded fixtures elsewhere")
    assert not report.has_cuda
    assert not report.gpus
    assert report.nvml_error  # a reason, not a crash


def test_static_torch_answer_agrees_with_importing_torch() -> None:
    """The fast path (no import) and a child that really imports torch must tell the same build."""
    forced = hardware.probe(import_torch=True).torch
    static = static_info()
    assert forced.probe_method == "import", forced.import_error
    assert (forced.version, forced.cuda_version, forced.cpu_only_build) == \
        (static.version, static.cuda_version, static.cpu_only_build)
    if static.cudnn_version is not None and forced.cudnn_version is not None:
        assert forced.cudnn_version == static.cudnn_version
    if not hardware.nvidia_device_present():
        assert forced.cuda_available is False  # what the static path assumes without a device


def test_probe_asks_an_already_imported_torch_directly() -> None:
    """`train` imports torch before probing: then no child process, and the answer is torch's own."""
    import torch

    seen = hardware.probe(import_torch=True).torch
    assert seen.probe_method == "import"
    assert seen.version == torch.__version__ and seen.cuda_version == torch.version.cuda
    assert seen.cuda_available == torch.cuda.is_available()
    assert seen.device_count == (torch.cuda.device_count() if torch.cuda.is_available() else 0)


def test_report_json_round_trip(report: HardwareReport) -> None:
    again = HardwareReport.model_validate_json(report.model_dump_json())
    assert again == report
    assert again.cores == report.cores


def test_env_keeps_only_relevant_variables() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0", "OMP_NUM_THREADS": "4", "HOME": "/root", "FASTTRAIN_X": "1", "PATH": "/bin"}
    assert hardware.probe_env(env) == {"CUDA_VISIBLE_DEVICES": "0", "FASTTRAIN_X": "1", "OMP_NUM_THREADS": "4"}


def test_cgroup_limits_from_real_files(tmp_path: Path) -> None:
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    (tmp_path / "memory.max").write_text("8589934592\n")
    assert hardware.cgroup_cpu_limit(tmp_path) == 2.5
    assert hardware.cgroup_memory_limit(tmp_path) == 8 * 2**30
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "memory.max").write_text("max\n")
    assert hardware.cgroup_cpu_limit(tmp_path) is None
    assert hardware.cgroup_memory_limit(tmp_path) is None
    assert hardware.cgroup_memory_limit(tmp_path / "missing") is None


def test_cpu_flags_decide_fast_bf16() -> None:
    text = "model name\t: Some CPU\nflags\t\t: fpu avx2 avx512f avx512_bf16\n"
    assert hardware.cpu_model(text) == "Some CPU"
    assert hardware.cpu_has_fast_bf16(text) is True
    assert hardware.cpu_has_fast_bf16("flags\t: fpu avx2\n") is False
    assert hardware.cpu_has_fast_bf16("") is None


def test_read_throughput_counts_real_files(tmp_path: Path) -> None:
    for cls in ("cat", "dog"):
        (tmp_path / cls).mkdir()
        for i in range(25):
            (tmp_path / cls / f"{i:03d}.jpg").write_bytes(os.urandom(10_000))
    disk = read_throughput(tmp_path)
    assert disk.role == "data"
    assert disk.sample_files == 50
    assert disk.sample_bytes == 500_000
    assert disk.read_mb_per_s and disk.read_mb_per_s > 0
    assert disk.files_per_s and disk.files_per_s > 0
    assert read_throughput(tmp_path, max_files=7).sample_files == 7


def test_read_throughput_of_an_empty_folder(tmp_path: Path) -> None:
    disk = read_throughput(tmp_path)
    assert disk.sample_files == 0 and disk.files_per_s is None


def test_sample_spreads_over_class_folders(tmp_path: Path) -> None:
    for cls in ("a", "b", "c"):
        (tmp_path / cls).mkdir()
        for i in range(5):
            (tmp_path / cls / f"{i}.png").write_bytes(b"x")
    picked = list(sample_files(tmp_path, limit=3))
    assert sorted(p.parent.name for p in picked) == ["a", "b", "c"]


def test_probe_with_data_dir_adds_the_data_disk(tmp_path: Path) -> None:
    (tmp_path / "x.bin").write_bytes(b"0" * 4096)
    r = hardware.probe(data_dir=tmp_path)
    data = next(d for d in r.disks if d.role == "data")
    assert data.path == str(tmp_path) and data.sample_files == 1 and data.sample_bytes == 4096


def test_throttle_bitmask_decoding() -> None:
    assert decode_throttle_reasons(0) == []
    assert decode_throttle_reasons(0x1) == ["gpu_idle"]
    assert decode_throttle_reasons(0x64) == ["sw_power_cap", "sw_thermal_slowdown", "hw_thermal_slowdown"]
    assert decode_throttle_reasons(0x88) == ["hw_slowdown", "hw_power_brake_slowdown"]
    assert decode_throttle_reasons(0x1000) == ["other_0x1000"]


def test_version_decoding() -> None:
    assert cuda_version_string(12040) == "12.4"
    assert cuda_version_string(11040) == "11.4"
    assert cuda_version_string(None) is None
    assert cudnn_int("9.24.0.43") == 92400
    assert cudnn_int("8.9.2.26") == 8902
    assert cudnn_int(None) is None


def test_version_file_of_the_installed_torch() -> None:
    import importlib.util
    origin = importlib.util.find_spec("torch").origin
    fields = read_version_file(Path(origin).parent)
    assert str(fields["__version__"]).startswith(md.version("torch"))
    assert "cuda" in fields


@pytest.mark.parametrize("info, cap, ok, reason", [
    (TorchInfo(installed=False), None, False, "not installed"),
    (TorchInfo(version="1.13.1"), None, False, "needs 2.0"),
    (TorchInfo(version="2.5.1", cxx_compiler=None), None, False, "C++ compiler"),
    (TorchInfo(version="2.5.1", cxx_compiler="/usr/bin/c++"), None, True, "CPU backend"),
    (TorchInfo(version="2.5.1", cuda_available=True, c_compiler="/usr/bin/cc"), 8.6, False, "triton"),
    (TorchInfo(version="2.5.1", cuda_available=True, triton_version="3.1.0"), 8.6, False, "C compiler"),
    (TorchInfo(version="2.5.1", cuda_available=True, triton_version="3.1.0", c_compiler="/usr/bin/cc"), 6.1, False,
     "7.0"),
    (TorchInfo(version="2.5.1", cuda_available=True, triton_version="3.1.0", c_compiler="/usr/bin/cc"), 7.5, True,
     "triton 3.1.0"),
])
def test_compile_support(info: TorchInfo, cap: float | None, ok: bool, reason: str) -> None:
    got_ok, got_reason = compile_support(info, (3, 11), "linux", cap)
    assert got_ok is ok and reason in got_reason


def test_gpu_capability_falls_back_to_the_spec_table() -> None:
    gpu = GpuInfo(index=0, name="Tesla T4", memory_total_bytes=15360 * 2**20)
    done = hardware.finish_gpu(gpu, [], None)
    assert (done.compute_capability, done.compute_capability_source) == ("7.5", "table")
    assert done.bf16_supported is False and done.tf32_supported is False
    seen = [{"index": 0, "name": "NVIDIA A10G", "capability": "8.6", "uuid": "GPU-1"}]
    a10g = hardware.finish_gpu(GpuInfo(index=0, name="NVIDIA A10G", memory_total_bytes=1, uuid="GPU-1"), seen, True)
    assert (a10g.compute_capability_source, a10g.bf16_supported, a10g.visible_to_torch) == ("torch", True, True)
    hidden = hardware.finish_gpu(GpuInfo(index=1, name="NVIDIA A10G", memory_total_bytes=1, uuid="GPU-2"), seen, True)
    assert hidden.visible_to_torch is False
    mig = hardware.finish_gpu(GpuInfo(index=0, name="NVIDIA A10G", memory_total_bytes=1, uuid="MIG-9"), seen, True,
                              by_uuid=False)  # UUIDs that do not compare: matched by name
    assert (mig.compute_capability, mig.visible_to_torch) == ("8.6", True)


def test_record_writes_a_fixture_that_loads_back(tmp_path: Path) -> None:
    path = tmp_path / "this_machine.json"
    live = hardware.record(path)
    again = HardwareReport.model_validate_json(path.read_text())
    assert again.cpu == live.cpu and again.torch == live.torch and again.hostname == live.hostname


def _child(code: str):
    import subprocess
    import sys
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_torch_that_crashes_on_import_becomes_a_finding() -> None:
    from fasttrain.doctor import checks as doctor
    from fasttrain.hardware.torch_build import finish_child, merge_child

    seen, error = finish_child(_child("raise ImportError('libcudnn.so.9: cannot open shared object file')"))
    assert seen is None and "libcudnn.so.9" in error
    info = merge_child(static_info(), seen, error)
    report = hardware.probe().model_copy(update={"torch": info})
    torch_finding = next(f for f in doctor.run_rules(report) if f.id == "torch")
    assert torch_finding.status == "fail" and "libcudnn.so.9" in torch_finding.detail


def test_a_hanging_torch_import_is_cut_off() -> None:
    from fasttrain.hardware.torch_build import finish_child

    seen, error = finish_child(_child("import time; time.sleep(30)"), timeout=0.5)
    assert seen is None and "did not finish" in error


def test_the_child_reports_one_json_line() -> None:
    from fasttrain.hardware.torch_build import finish_child

    seen, error = finish_child(_child('print("noise"); print(\'{"version": "9.9", "cuda_available": false}\')'))
    assert error is None and seen == {"version": "9.9", "cuda_available": False}
