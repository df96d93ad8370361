"""probe() -> HardwareReport: the look at nvidia-smi, htop, free and df that every field note starts with.

One small function per reading. The GPU side is in nvml.py, the torch build in
torch_build.py, disk speed in disk.py. Nothing here raises for a missing driver, GPU,
NVML or torch: the report says what is missing and the doctor turns that into findings.
torch is imported only in a child process and only when an NVIDIA device is present (see
torch_build.py), so the probe costs well under a second on a machine without a GPU.
"""
from __future__ import annotations

import datetime as dt
import math
import os
import platform
import socket
import sys
import time
from pathlib import Path

import psutil

from fasttrain import __version__
from fasttrain.hardware.disk import free_space, read_throughput
from fasttrain.hardware.nvml import probe_nvml
from fasttrain.hardware.report import CpuInfo, DiskInfo, GpuInfo, HardwareReport, MemoryInfo, TorchInfo
from fasttrain.hardware.torch_build import compile_support, finish_child, merge_child, start_child, static_info

SHM_PATH = Path("/dev/shm")
# Environment variables that change how training runs (shown by doctor; some have rules).
ENV_VARS = (
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "CUDA_LAUNCH_BLOCKING", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "TORCH_COMPILE_DISABLE", "TORCHINDUCTOR_CACHE_DIR",
    "CUBLAS_WORKSPACE_CONFIG", "NCCL_DEBUG", "NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_SOCKET_IFNAME",
    "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "LOCAL_RANK", "SLURM_JOB_ID", "KAGGLE_KERNEL_RUN_TYPE",
    "COLAB_GPU",
)


# ---- CPU -------------------------------------------------------------------------------------------------

def _cpuinfo_text() -> str:
    try:
        return Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def cpu_model(cpuinfo: str) -> str:
    for line in cpuinfo.splitlines():
        if line.lower().startswith(("model name", "hardware", "processor\t: arm")):
            return line.split(":", 1)[1].strip() or "unknown"
    return platform.processor() or platform.machine() or "unknown"


def cpu_has_fast_bf16(cpuinfo: str) -> bool | None:
    """AVX512-BF16 or AMX-BF16: bf16 autocast on the CPU is only faster than fp32 with one of them."""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            return bool(flags & {"avx512_bf16", "amx_bf16"})
    return None


def cgroup_cpu_limit(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """CPUs a container may use (cgroup v2 cpu.max 'quota period', v1 cfs files); None when unlimited."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota_us = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period_us = int((root / "cpu" / "cpu.cfs_period_us").read_text())
        return quota_us / period_us if quota_us > 0 else None
    except (OSError, ValueError):
        return None


def probe_cpu() -> tuple[CpuInfo, bool | None]:
    """CpuInfo and whether the CPU runs bf16 fast. usable_cores: affinity mask, then the cgroup quota."""
    text = _cpuinfo_text()
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else logical
    quota = cgroup_cpu_limit()
    if quota is not None:
        usable = min(usable, max(1, math.floor(quota)))
    try:
        load = os.getloadavg()[0]
    except (OSError, AttributeError):
        load = None
    cpu = CpuInfo(model=cpu_model(text), physical_cores=psutil.cpu_count(logical=False),
                  logical_cores=logical, usable_cores=usable, load_1m=round(load, 2) if load is not None else None)
    return cpu, cpu_has_fast_bf16(text)


# ---- memory ------------------------------------------------------------------------------------------------

def cgroup_memory_limit(root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """A container's RAM limit in bytes (cgroup v2 memory.max or v1 limit_in_bytes); None when unlimited."""
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        try:
            raw = path.read_text().strip()
        except OSError:
            continue
        if raw == "max" or not raw.isdigit():
            return None
        limit = int(raw)
        return limit if limit < 2**60 else None  # v1 writes 'unlimited' as a huge number
    return None


def shm_space(path: Path = SHM_PATH) -> tuple[int | None, int | None]:
    """(size, free) of /dev/shm in bytes: DataLoader workers hand batches over through it."""
    try:
        st = os.statvfs(path)
    except (OSError, AttributeError):  # no /dev/shm (macOS), no statvfs (Windows)
        return None, None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def probe_memory() -> MemoryInfo:
    vm, swap = psutil.virtual_memory(), psutil.swap_memory()
    limit = cgroup_memory_limit()
    total = min(vm.total, limit) if limit else vm.total
    available = min(vm.available, total)
    shm_total, shm_free = shm_space()
    return MemoryInfo(ram_total_bytes=total, ram_available_bytes=available, swap_total_bytes=swap.total,
                      swap_used_bytes=swap.used, shm_total_bytes=shm_total, shm_free_bytes=shm_free,
                      host_ram_total_bytes=vm.total, cgroup_limit_bytes=limit)


# ---- disks and environment -------------------------------------------------------------------------------

def probe_disks(data_dir: Path | None, disk_paths: list[Path] | None) -> list[DiskInfo]:
    try:
        disks = [free_space(Path.cwd(), "cwd")]
    except OSError:  # the working directory was deleted under us
        disks = []
    disks += [free_space(p, "path") for p in disk_paths or []]
    if data_dir is not None:
        disks.append(read_throughput(data_dir))
    return disks


def probe_env(environ: os._Environ[str] | dict[str, str] = os.environ) -> dict[str, str]:
    """The variables in ENV_VARS and every FASTTRAIN_* one, as set (unset ones are left out)."""
    return {k: v for k, v in sorted(environ.items()) if k in ENV_VARS or k.startswith("FASTTRAIN_")}


# ---- GPUs x torch ------------------------------------------------------------------------------------------

def nvidia_device_present(dev: Path = Path("/dev")) -> bool:
    """A device node of the NVIDIA, Jetson (nvhost), WSL (dxg) or ROCm (kfd) driver: torch.cuda may work there."""
    try:
        return any(name.startswith(("nvidia", "nvhost", "dxg", "kfd")) for name in os.listdir(dev))
    except OSError:
        return False


def _process_name(pid: int) -> str:
    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return ""  # another container's process, or gone


def table_capability(name: str) -> str | None:
    """Compute capability from data/gpus.csv (gpus.py) when neither NVML nor torch gave it."""
    try:
        from fasttrain.hardware.gpus import find_gpu
        spec = find_gpu(name)
    except Exception:  # the spec file is optional here: a missing one only loses this fallback
        return None
    return spec.compute_capability if spec else None


def finish_gpu(gpu: GpuInfo, torch_devices: list[dict], torch_saw_cuda: bool | None,
               by_uuid: bool = True) -> GpuInfo:
    """Compute capability (torch > NVML > spec table), bf16/TF32 from it, and whether torch can see this GPU.

    torch's devices are matched to NVML's by UUID; by name when the UUIDs do not compare (MIG slices, old torch).
    """
    update: dict[str, object] = {}
    match = next((d for d in torch_devices if gpu.uuid and d.get("uuid") == gpu.uuid), None)
    if match is None and torch_devices and (not gpu.uuid or not by_uuid):
        match = next((d for d in torch_devices if d.get("name") == gpu.name), None)
    if match is not None:
        update.update(compute_capability=match["capability"], compute_capability_source="torch")
    elif gpu.compute_capability is None and (cc := table_capability(gpu.name)):
        update.update(compute_capability=cc, compute_capability_source="table")
    capability = update.get("compute_capability", gpu.compute_capability)
    if capability:
        ampere = float(str(capability)) >= 8.0
        update.update(bf16_supported=ampere, tf32_supported=ampere)
    if torch_saw_cuda is not None:
        update["visible_to_torch"] = match is not None if torch_devices else False
    return gpu.model_copy(update=update)


def _ask_loaded_torch() -> tuple[dict | None, str | None]:
    """What the torch already imported in this process sees (same answer as the child, without 2.5 s)."""
    import gc

    import torch

    from fasttrain.hardware import torch_child
    # Free memory only where this process already uses CUDA (a training process that chose its device): a
    # process that does not train here (the launcher of several workers) must not make a context on any GPU.
    try:
        used = torch.cuda.is_initialized()
        if used:  # an earlier run in this process (a notebook's first fasttrain.train()): what it left unreachable,
            gc.collect()              # cycles too, is freed and the allocator's cache handed back, or the free
            torch.cuda.empty_cache()  # memory read next counts them as used and the plan splits the batch
        return torch_child.collect("current" if used else "none"), None
    except Exception as exc:  # a broken CUDA setup raising on first use
        return None, f"torch: {type(exc).__name__}: {exc}"


def combine_torch(info: TorchInfo, gpus: list[GpuInfo], python: tuple[int, int], cpu_bf16: bool | None) -> TorchInfo:
    """Add what depends on both: compile support for the device training will use, CPU bf16."""
    caps = [float(g.compute_capability) for g in gpus if g.compute_capability and g.visible_to_torch is not False]
    ok, reason = compile_support(info, python, sys.platform, min(caps) if caps and info.cuda_available else None)
    return info.model_copy(update={"compile_ok": ok, "compile_reason": reason, "cpu_bf16_fast": cpu_bf16})


# ---- the whole report ------------------------------------------------------------------------------------

def probe(data_dir: Path | None = None, disk_paths: list[Path] | None = None,
          import_torch: bool | None = None) -> HardwareReport:
    """Look at this machine. import_torch: None = only when an NVIDIA device is present; True/False force it."""
    start = time.perf_counter()
    torch_info = static_info()
    want_child = import_torch if import_torch is not None else (torch_info.installed and nvidia_device_present())
    in_process = want_child and "torch" in sys.modules  # `train` already paid for the import: ask it directly
    child = start_child() if want_child and torch_info.installed and not in_process else None
    nvml = probe_nvml(exclude_pids=[os.getpid()] + ([child.pid] if child else []), process_name=_process_name)
    if import_torch is None and child is None and nvml.gpus and torch_info.installed:
        child = start_child()  # NVML sees a GPU that has no /dev node we know (e.g. WSL): ask torch
    cpu, cpu_bf16 = probe_cpu()
    memory = probe_memory()
    disks = probe_disks(data_dir, disk_paths)
    devices: list[dict] = []
    asked = child is not None or in_process
    if asked:
        seen, error = finish_child(child) if child is not None else _ask_loaded_torch()
        torch_info = merge_child(torch_info, seen, error)
        devices = list((seen or {}).get("devices") or [])
    by_uuid = any(d.get("uuid") in {g.uuid for g in nvml.gpus} for d in devices)
    gpus = [finish_gpu(g, devices, torch_info.cuda_available if asked else None, by_uuid) for g in nvml.gpus]
    python = sys.version_info[:2]
    torch_info = combine_torch(torch_info, gpus, python, cpu_bf16)
    return HardwareReport(
        hostname=socket.gethostname(), platform=platform.platform(),
        collected_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        nvml_available=nvml.available, nvml_error=nvml.error, driver_version=nvml.driver_version,
        cuda_driver_version=nvml.cuda_driver_version, gpus=gpus, torch=torch_info, cpu=cpu, memory=memory,
        disks=disks, env=probe_env(), fasttrain_version=__version__,
        python_version=platform.python_version(), probe_seconds=round(time.perf_counter() - start, 3),
    )


def record(path: Path, data_dir: Path | None = None) -> HardwareReport:
    """Probe this machine and write the bare report as a fixture file (tests/fixtures/reports/<name>.json).

    `python -m fasttrain.hardware.machine FILE.json` does the same; so does `fasttrain doctor --json > FILE.json`
    (doctor --report-from and the tests read both forms).
    """
    import json
    report = probe(data_dir=data_dir)
    path.write_text(json.dumps(report.model_dump(mode="json"), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m fasttrain.hardware.machine FILE.json   (records this machine's HardwareReport)")
    print(f"recorded {record(Path(sys.argv[1])).model_dump()['hostname']} -> {sys.argv[1]}")
