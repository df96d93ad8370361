"""hardware_nvml's decoding of NVML answers. There is no GPU here, so NVML is stood in for by a small object with
pynvml's function names returning what a driver returns for an idle Tesla T4 (units as NVML gives them: mW,
MHz, bytes, (major, minor)). It checks the unit conversions, the process filter, and that a reading the
GPU does not support ("Not Supported", raised by pynvml) loses only that reading."""
from __future__ import annotations

from types import SimpleNamespace

from fasttrain.hardware.nvml import probe_nvml

MiB = 2**20


class NotSupported(Exception):
    pass


class FakeT4:
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, fail_init: bool = False) -> None:
        self.fail_init = fail_init
        self.shut = False

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise RuntimeError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.90.07"

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return 12040

    def nvmlDeviceGetCount(self) -> int:
        return 1

    def nvmlDeviceGetHandleByIndex(self, i: int) -> str:
        return f"h{i}"

    def nvmlDeviceGetName(self, h: str) -> bytes:
        return b"Tesla T4"  # older pynvml returns bytes

    def nvmlDeviceGetUUID(self, h: str) -> str:
        return "GPU-5c1d8a3e-7b7f-2a4d-9f61-0c3e4b8d2a17"

    def nvmlDeviceGetMemoryInfo(self, h: str):
        return SimpleNamespace(total=15360 * MiB, used=1200 * MiB, free=14160 * MiB)

    def nvmlDeviceGetUtilizationRates(self, h: str):
        return SimpleNamespace(gpu=3, memory=1)

    def nvmlDeviceGetTemperature(self, h: str, sensor: int) -> int:
        return 38

    def nvmlDeviceGetPowerUsage(self, h: str) -> int:
        return 9640  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, h: str) -> int:
        return 70000  # mW

    def nvmlDeviceGetClockInfo(self, h: str, clock: int) -> int:
        return {1: 585, 2: 405}[clock]

    def nvmlDeviceGetMaxClockInfo(self, h: str, clock: int) -> int:
        return {1: 1590, 2: 5001}[clock]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: str) -> int:
        return 0x1

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: str) -> int:
        return 0x1

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: str) -> int:
        return 1

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: str) -> int:
        return 3

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: str) -> int:
        raise NotSupported("Not Supported")

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: str) -> int:
        return 16

    def nvmlDeviceGetCudaComputeCapability(self, h: str) -> tuple[int, int]:
        return (7, 5)

    def nvmlDeviceGetComputeRunningProcesses(self, h: str):
        return [SimpleNamespace(pid=4242, usedGpuMemory=1100 * MiB),  # someone else
                SimpleNamespace(pid=100, usedGpuMemory=300 * MiB),  # ourselves: excluded
                SimpleNamespace(pid=777, usedGpuMemory=None)]  # memory not visible (container)

    def nvmlDeviceGetGraphicsRunningProcesses(self, h: str):
        return [SimpleNamespace(pid=4242, usedGpuMemory=1100 * MiB)]  # listed twice: counted once


def test_an_idle_t4_as_nvml_reports_it() -> None:
    lib = FakeT4()
    result = probe_nvml(exclude_pids=[100], process_name=lambda pid: {4242: "python"}.get(pid, ""), library=lib)
    assert result.available and result.error is None and lib.shut
    assert (result.driver_version, result.cuda_driver_version) == ("550.90.07", "12.4")
    (gpu,) = result.gpus
    assert gpu.name == "Tesla T4" and gpu.uuid.startswith("GPU-5c1d")
    assert (gpu.memory_total_bytes, gpu.memory_used_bytes, gpu.memory_free_bytes) == (
        15360 * MiB,
        1200 * MiB,
        14160 * MiB,
    )
    assert (gpu.power_draw_w, gpu.power_limit_w) == (9.64, 70.0)
    assert (gpu.sm_clock_mhz, gpu.sm_clock_max_mhz, gpu.mem_clock_mhz, gpu.mem_clock_max_mhz) == (585, 1590, 405, 5001)
    assert gpu.throttle_reasons == ["gpu_idle"]
    assert (gpu.pcie_gen, gpu.pcie_gen_max, gpu.pcie_width, gpu.pcie_width_max) == (1, 3, None, 16)  # one unsupported
    assert (gpu.compute_capability, gpu.compute_capability_source) == ("7.5", "nvml")
    assert [(p.pid, p.name, p.used_bytes) for p in gpu.processes] == [(4242, "python", 1100 * MiB), (777, "", None)]


def test_no_driver_is_a_reason_not_an_exception() -> None:
    result = probe_nvml(library=FakeT4(fail_init=True))
    assert not result.available and "Driver Not Loaded" in result.error and result.gpus == []


def test_the_real_library_here_never_raises() -> None:
    result = probe_nvml()
    assert result.available or result.error
