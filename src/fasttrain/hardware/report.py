"""HardwareReport: what the machine is, as plain JSON-serialisable data.

probe.py fills it in; doctor rules, the Plan and the tests read it. Tests use
recorded reports (tests/fixtures/reports/*.json) for machines we do not have: GPUs, containers.
Byte counts are bytes; clocks MHz; power W; temperatures degrees C.
"""
from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# The one guard for numbers read from outside (a probe, or a report file given to `doctor --report-from`): what is
# divided by is at least 1, what is counted or measured is not negative, and no float is nan or inf, so no rule,
# forecast or view downstream divides by zero or prints nan. A file that breaks one is refused with its field.
Count = Annotated[int, Field(ge=1)]          # cores; totals a share is taken of (bytes)
Amount = Annotated[int, Field(ge=0)]         # bytes, MHz, indices, files
Measure = Annotated[float, Field(ge=0)]      # rates, seconds, watts, load
Percent = Annotated[float, Field(ge=0, le=100)]


class _Data(BaseModel):
    # extra="ignore": newer probes may add fields, old fixtures still load; allow_inf_nan=False: see Count above.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)


class GpuProcess(_Data):
    pid: Amount
    name: str = ""
    used_bytes: Amount | None = None


class GpuInfo(_Data):
    index: Amount
    name: str
    memory_total_bytes: Amount  # 0: NVML could not read it (nvml.py)
    memory_used_bytes: Amount | None = None
    memory_free_bytes: Amount | None = None
    utilization_pct: Percent | None = None
    temperature_c: float | None = None
    power_draw_w: Measure | None = None
    power_limit_w: Measure | None = None
    sm_clock_mhz: Amount | None = None
    sm_clock_max_mhz: Amount | None = None
    mem_clock_mhz: Amount | None = None
    mem_clock_max_mhz: Amount | None = None
    throttle_reasons: list[str] = Field(default_factory=list)
    pcie_gen: Amount | None = None
    pcie_gen_max: Amount | None = None
    pcie_width: Amount | None = None
    pcie_width_max: Amount | None = None
    processes: list[GpuProcess] = Field(default_factory=list)
    compute_capability: str | None = None
    bf16_supported: bool | None = None
    tf32_supported: bool | None = None
    # Added by the doctor probe (probe.py):
    uuid: str | None = None
    compute_capability_source: str | None = None  # "torch", "nvml" or "table" (data/compute_capability.csv)
    visible_to_torch: bool | None = None  # False when CUDA_VISIBLE_DEVICES or a broken CUDA hides it from torch


class TorchDevice(_Data):
    """A CUDA device as torch numbers it (after CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER), from the torch child."""

    index: Amount
    name: str = ""
    uuid: str | None = None         # "GPU-..." like NVML's, so the two can be matched
    total_memory: Count | None = None  # bytes
    capability: str | None = None
    free_memory: Amount | None = None   # bytes torch.cuda.mem_get_info() said were free, read by a process with a
    #                                  CUDA context on it (its own context's memory is already taken)


class TorchInfo(_Data):
    installed: bool = True
    version: str | None = None
    cuda_version: str | None = None  # the CUDA the build was made for; None on a CPU-only build
    cudnn_version: Amount | None = None
    cpu_only_build: bool = True
    cuda_available: bool = False
    device_count: Amount = 0
    nccl_version: str | None = None
    triton_version: str | None = None
    c_compiler: str | None = None
    compile_ok: bool = False
    compile_reason: str = ""
    cpu_bf16_fast: bool | None = None  # AVX512-BF16 or AMX on the CPU
    # Added by the doctor probe: how the numbers were obtained. "static" reads torch/version.py and the
    # installed wheels without importing torch (no NVIDIA device here, so CUDA cannot be available);
    # "import" ran `import torch` in a child process (a GPU is present).
    probe_method: str = ""
    import_error: str | None = None  # torch is installed but importing it failed (last line of the error)
    cxx_compiler: str | None = None  # inductor's CPU backend compiles C++
    # torch.cuda.get_arch_list(): the GPU architectures the build has kernels for ("sm_75", "compute_120"); None
    # when not asked (no GPU here, or a report recorded before fasttrain asked). hardware/arch.py judges it.
    arch_list: list[str] | None = None
    # torch's own view of the devices, in its order, and the one this process trains on (set_device; 0 by
    # default). Empty in reports recorded before fasttrain kept them: then the first GPU torch can see trains.
    devices: list[TorchDevice] = Field(default_factory=list)
    current_device: Amount = 0


class CpuInfo(_Data):
    model: str = "unknown"
    physical_cores: Count | None = None
    logical_cores: Count = 1
    usable_cores: Count | None = None  # affinity / cgroup limit, when smaller than logical
    load_1m: Measure | None = None


class MemoryInfo(_Data):
    ram_total_bytes: Count
    ram_available_bytes: Amount
    swap_total_bytes: Amount = 0
    swap_used_bytes: Amount = 0
    shm_total_bytes: Amount | None = None
    shm_free_bytes: Amount | None = None
    # Added by the doctor probe: a container's memory limit (cgroup memory.max). When it is set,
    # ram_total_bytes is the smaller of it and the host RAM: that is what the loaders can really use.
    host_ram_total_bytes: Count | None = None
    cgroup_limit_bytes: Amount | None = None


class DiskInfo(_Data):
    path: str
    total_bytes: Amount | None = None
    free_bytes: Amount | None = None
    read_mb_per_s: Measure | None = None
    files_per_s: Measure | None = None
    sample_files: Amount | None = None
    # Added by the doctor probe:
    role: str = ""  # "cwd", "data" or "path"
    sample_bytes: Amount | None = None
    sample_seconds: Measure | None = None
    cold_cache: bool | None = None  # page cache dropped (posix_fadvise DONTNEED) before reading each file


class HardwareReport(_Data):
    hostname: str = ""
    platform: str = ""
    collected_at: str = ""
    nvml_available: bool = False
    nvml_error: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus: list[GpuInfo] = Field(default_factory=list)
    torch: TorchInfo = TorchInfo()
    cpu: CpuInfo = CpuInfo()
    memory: MemoryInfo
    disks: list[DiskInfo] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    # Added by the doctor probe:
    fasttrain_version: str = ""
    probe_seconds: Measure | None = None
    python_version: str = ""

    @property
    def has_cuda(self) -> bool:
        """A GPU that torch can actually use."""
        return self.torch.cuda_available and self.torch.device_count > 0

    def training_gpu(self) -> GpuInfo | None:
        """The GPU training runs on, as NVML describes it, or None without CUDA: torch's current device (device 0
        unless a worker set its own), matched by UUID (NVML counts GPUs in PCI order, torch after
        CUDA_VISIBLE_DEVICES=1,0 or in its fastest-first order), else by name; a report without torch's devices
        falls back to the first GPU torch can see.

        The one answer to "which GPU trains" for plan, doctor, recommendation, verdict and estimate.
        """
        if not self.has_cuda or not self.gpus:
            return None
        device = self.training_device()
        if device is not None:
            same = [g for g in self.gpus if device.uuid and g.uuid == device.uuid] or \
                [g for g in self.gpus if g.name == device.name and g.visible_to_torch is not False]
            if same:
                return same[0]
        return next((g for g in self.gpus if g.visible_to_torch is not False), self.gpus[0])

    def training_memory(self) -> tuple[int, str] | None:
        """(bytes of GPU memory a run here can use, where the number comes from), or None without CUDA. What the
        device reports free, not the card's size: a MIG slice has a fraction of it, a laptop's desktop holds some,
        another process may hold more. "torch": torch.cuda.mem_get_info() of the training device, read with a
        CUDA context on it (so that context is already taken); "nvml": NVML's free memory of the training GPU;
        "total": neither was recorded."""
        gpu = self.training_gpu()
        if gpu is None:
            return None
        device = self.training_device()
        if device is not None and device.free_memory is not None:
            return device.free_memory, "torch"
        if gpu.memory_free_bytes is not None:
            return gpu.memory_free_bytes, "nvml"
        return gpu.memory_total_bytes, "total"

    def training_device(self) -> TorchDevice | None:
        """torch's view of the device this process trains on, when the report has it."""
        return next((d for d in self.torch.devices if d.index == self.torch.current_device), None)

    @property
    def cores(self) -> int:
        return self.cpu.usable_cores or self.cpu.logical_cores
