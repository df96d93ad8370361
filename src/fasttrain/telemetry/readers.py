"""What the telemetry sampler reads off the training thread: host RAM and process RSS, GPU memory, utilisation, power.

Each reader returns a plain dict with telemetry's key conventions (bytes, watts, percent) and never raises;
`GpuReader.reason`/`nvml_reason` say in words why GPU readings are missing (CPU device, no NVML library, ...).
torch is imported lazily, and only for a CUDA device.
"""
from __future__ import annotations

import contextlib
import sys
from typing import Any


def host_sample() -> dict[str, Any]:
    """Host RAM of the machine and the resident memory of this process plus its loader workers."""
    try:
        import psutil
    except ImportError:  # psutil is a dependency, but a broken install should not stop training
        return {}
    vm = psutil.virtual_memory()
    out: dict[str, Any] = {
        "host_ram_total_bytes": int(vm.total),
        "host_ram_used_bytes": int(vm.total - vm.available),
        "host_ram_available_bytes": int(vm.available),
    }
    rss = tree_rss_bytes()
    if rss is None:
        try:
            rss = int(psutil.Process().memory_info().rss)
        except Exception:
            rss = None
    if rss is not None:
        out["process_rss_bytes"] = rss
    return out


_PAGE = None


def tree_pids() -> list[int]:
    """This process and its direct children (DataLoader workers), from /proc (Linux; only this one elsewhere)."""
    import glob
    import os

    pids = [os.getpid()]
    for path in glob.glob("/proc/self/task/*/children"):
        try:
            with open(path) as fh:
                pids += [int(p) for p in fh.read().split()]
        except (OSError, ValueError):  # the thread exited meanwhile
            continue
    return pids


def tree_rss_bytes() -> int | None:
    """RSS of this process and its direct children (DataLoader workers), from /proc (Linux).

    psutil.Process().children() scans every process on the machine (~10 ms with 100 processes, far more
    on a busy server) while holding the GIL; /proc/self/task/*/children lists only ours (~0.1 ms).
    Shared copy-on-write pages count once per process, as in `top`.
    """
    global _PAGE
    try:
        import os

        if _PAGE is None:
            _PAGE = os.sysconf("SC_PAGE_SIZE")
        pids = tree_pids()
        total = 0
        for pid in pids:
            try:
                with open(f"/proc/{pid}/statm") as fh:
                    total += int(fh.read().split()[1]) * _PAGE  # second field: resident pages
            except (OSError, IndexError, ValueError):  # the worker exited meanwhile
                continue
        return total
    except (OSError, ValueError):
        return None


class GpuReader:
    """Reads one CUDA device: allocator counters from torch, utilisation and power from NVML.

    `reason` says in words why readings are missing (CPU device, no NVML library, ...);
    `read()` returns whatever is available and never raises.
    """

    def __init__(self, device: str, gpu_index: int = 0):
        self.device = device
        self.gpu_index = gpu_index
        self.reason: str | None = None      # why there are no GPU readings at all
        self.nvml_reason: str | None = None  # why utilisation/power are missing
        self._torch: Any = None
        self._nvml: Any = None
        self._handle: Any = None
        self._opened = False
        if not device.startswith("cuda"):
            self.reason = self.nvml_reason = f"device is {device}: no GPU readings"

    def open(self) -> None:
        self._opened = True
        if not self.device.startswith("cuda"):
            return
        torch = sys.modules.get("torch")
        if torch is None:
            try:
                import torch
            except ImportError as exc:
                torch = None
                self.reason = f"torch not importable: {exc}"
        if torch is not None and torch.cuda.is_available():
            self._torch = torch
        elif self.reason is None:
            self.reason = "torch sees no CUDA device"
        self._open_nvml()

    def _open_nvml(self) -> None:
        try:
            import pynvml  # from nvidia-ml-py
        except ImportError as exc:
            self.nvml_reason = f"nvidia-ml-py not installed ({exc})"
            return
        try:
            pynvml.nvmlInit()
        except Exception as exc:
            self.nvml_reason = f"NVML unavailable: {exc.__class__.__name__}: {exc}"
            return
        self._nvml = pynvml
        try:
            self._handle = self._nvml_handle(pynvml)
        except Exception as exc:
            self.nvml_reason = f"NVML has no GPU {self.gpu_index}: {exc}"
            self._handle = None

    def _nvml_handle(self, pynvml: Any) -> Any:
        """NVML counts GPUs physically; torch after CUDA_VISIBLE_DEVICES. Match them by UUID when possible."""
        if self._torch is not None:
            try:
                uuid = str(self._torch.cuda.get_device_properties(self.gpu_index).uuid)
                return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
            except Exception:
                pass
        return pynvml.nvmlDeviceGetHandleByIndex(self.gpu_index)

    def read(self) -> dict[str, Any]:
        if not self._opened:
            self.open()
        out: dict[str, Any] = {}
        torch = self._torch
        if torch is not None:
            try:  # allocator counters: host-side reads, no device sync
                i = self.gpu_index
                out["gpu_mem_allocated_bytes"] = int(torch.cuda.memory_allocated(i))
                out["gpu_mem_reserved_bytes"] = int(torch.cuda.memory_reserved(i))
                out["gpu_mem_peak_bytes"] = int(torch.cuda.max_memory_allocated(i))
            except Exception:
                pass
        if self._handle is not None:
            nv = self._nvml
            with contextlib.suppress(Exception):
                out["gpu_util_pct"] = float(nv.nvmlDeviceGetUtilizationRates(self._handle).gpu)
            with contextlib.suppress(Exception):  # mW -> W
                out["gpu_power_w"] = nv.nvmlDeviceGetPowerUsage(self._handle) / 1000.0
            with contextlib.suppress(Exception):
                out["gpu_power_limit_w"] = nv.nvmlDeviceGetEnforcedPowerLimit(self._handle) / 1000.0
            with contextlib.suppress(Exception):
                out["gpu_mem_total_bytes"] = int(nv.nvmlDeviceGetMemoryInfo(self._handle).total)
            out.update(other_processes(nv, self._handle))
        return out

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None
            self._handle = None
        self._opened = False  # a later start() opens NVML again


def other_processes(nv: Any, handle: Any) -> dict[str, Any]:
    """`gpu_other_processes`: compute and graphics processes on the GPU other than this run's (NVML), or {}."""
    import os

    ours = set(tree_pids()) | {os.getppid()}
    pids: set[int] = set()
    for query in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
        try:
            pids |= {int(p.pid) for p in getattr(nv, query)(handle)}
        except Exception:
            continue
    if not pids & ours:  # NVML lists host PIDs: in a container this run is not among them, so nothing is known
        return {}
    return {"gpu_other_processes": len(pids - ours)}
