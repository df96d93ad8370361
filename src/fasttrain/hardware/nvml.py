"""Every NVIDIA GPU as NVML (nvidia-ml-py) sees it: what nvidia-smi shows, as GpuInfo.

Each reading is taken on its own: laptops, vGPUs and old drivers answer "Not Supported" for some
(power, PCIe, processes), and one missing number must not lose the rest. No driver, no NVML library,
or no GPU is a result (available=False with the reason), never an exception.
Units: bytes, MHz, W, degrees C.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from fasttrain.hardware.report import GpuInfo, GpuProcess

# NVML's nvmlClocksThrottleReason* / nvmlClocksEventReason* bits (nvml.h; the ABI is stable).
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


def decode_throttle_reasons(mask: int | None) -> list[str]:
    """0x64 -> ['sw_power_cap', 'sw_thermal_slowdown', 'hw_thermal_slowdown']; unknown bits are named by value."""
    if not mask:
        return []
    names = [name for bit, name in THROTTLE_BITS if mask & bit]
    known = sum(bit for bit, _ in THROTTLE_BITS)
    if mask & ~known:
        names.append(f"other_0x{mask & ~known:x}")
    return names


def cuda_version_string(code: int | None) -> str | None:
    """NVML's 12040 -> '12.4' (the newest CUDA the driver supports)."""
    if not code:
        return None
    return f"{code // 1000}.{(code % 1000) // 10}"


@dataclass
class NvmlResult:
    available: bool
    error: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: list[GpuInfo] = field(default_factory=list)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _read(fn: Callable[..., Any], *args: Any) -> Any:
    """One NVML reading, or None when this GPU or driver does not support it."""
    try:
        return fn(*args)
    except Exception:  # pynvml.NVMLError_NotSupported, _NoPermission, _Unknown... and AttributeError on old pynvml
        return None


def _processes(nv: Any, handle: Any, exclude: Iterable[int], process_name: Callable[[int], str]) -> list[GpuProcess]:
    """Compute and graphics processes holding memory on this GPU (ours and our torch child excluded)."""
    skip = set(exclude)
    seen: dict[int, GpuProcess] = {}
    for getter in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        for proc in _read(getattr(nv, getter, lambda h: []), handle) or []:
            pid = int(proc.pid)
            if pid in skip or pid in seen:
                continue
            used = getattr(proc, "usedGpuMemory", None)
            # NVML reports "not available" (in containers, under WDDM) as a huge sentinel or None.
            used = int(used) if isinstance(used, int) and 0 <= used < 2**50 else None
            seen[pid] = GpuProcess(pid=pid, name=process_name(pid), used_bytes=used)
    return list(seen.values())


def _gpu(nv: Any, index: int, exclude: Iterable[int], process_name: Callable[[int], str]) -> GpuInfo:
    h = nv.nvmlDeviceGetHandleByIndex(index)
    mem = _read(nv.nvmlDeviceGetMemoryInfo, h)
    util = _read(nv.nvmlDeviceGetUtilizationRates, h)
    power = _read(nv.nvmlDeviceGetPowerUsage, h)  # mW
    limit = _read(nv.nvmlDeviceGetEnforcedPowerLimit, h)  # mW
    reasons_fn = (getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)  # the name since driver 535
                  or getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
    reasons = _read(reasons_fn, h) if reasons_fn else None
    cc = _read(nv.nvmlDeviceGetCudaComputeCapability, h)
    return GpuInfo(
        index=index,
        name=_text(nv.nvmlDeviceGetName(h)),
        uuid=_text(u) if (u := _read(nv.nvmlDeviceGetUUID, h)) else None,
        memory_total_bytes=int(mem.total) if mem else 0,
        memory_used_bytes=int(mem.used) if mem else None,
        memory_free_bytes=int(mem.free) if mem else None,
        utilization_pct=float(util.gpu) if util else None,
        temperature_c=_read(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU),
        power_draw_w=power / 1000 if power is not None else None,
        power_limit_w=limit / 1000 if limit is not None else None,
        sm_clock_mhz=_read(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM),
        sm_clock_max_mhz=_read(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_SM),
        mem_clock_mhz=_read(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM),
        mem_clock_max_mhz=_read(nv.nvmlDeviceGetMaxClockInfo, h, nv.NVML_CLOCK_MEM),
        throttle_reasons=decode_throttle_reasons(reasons),
        pcie_gen=_read(nv.nvmlDeviceGetCurrPcieLinkGeneration, h),
        pcie_gen_max=_read(nv.nvmlDeviceGetMaxPcieLinkGeneration, h),
        pcie_width=_read(nv.nvmlDeviceGetCurrPcieLinkWidth, h),
        pcie_width_max=_read(nv.nvmlDeviceGetMaxPcieLinkWidth, h),
        processes=_processes(nv, h, exclude, process_name),
        compute_capability=f"{cc[0]}.{cc[1]}" if cc else None,
        compute_capability_source="nvml" if cc else None,
    )


def probe_nvml(exclude_pids: Iterable[int] = (), process_name: Callable[[int], str] = lambda pid: "",
               library: Any = None) -> NvmlResult:
    """All GPUs NVML can see. Never raises: a missing library or driver is reported in `error`.

    library: the pynvml module (default), or an object with the same functions (tests on GPU-less machines).
    """
    if library is None:
        try:
            import pynvml
        except ImportError:
            return NvmlResult(False, "nvidia-ml-py (pynvml) is not installed")
        library = pynvml
    nv = library
    try:
        nv.nvmlInit()
    except Exception as exc:
        return NvmlResult(False, f"NVML unavailable: {_text(exc)} (no NVIDIA driver on this machine?)")
    try:
        result = NvmlResult(
            True,
            driver_version=_text(v) if (v := _read(nv.nvmlSystemGetDriverVersion)) else None,
            cuda_driver_version=cuda_version_string(_read(nv.nvmlSystemGetCudaDriverVersion_v2)
                                                    or _read(nv.nvmlSystemGetCudaDriverVersion)),
        )
        count = _read(nv.nvmlDeviceGetCount) or 0
        exclude = list(exclude_pids)
        for i in range(count):
            try:
                result.gpus.append(_gpu(nv, i, exclude, process_name))
            except Exception as exc:  # a GPU that fell off the bus answers nothing at all
                result.error = f"GPU {i}: {_text(exc)}"
        return result
    finally:
        _read(nv.nvmlShutdown)
