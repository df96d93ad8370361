"""Hardware: what this machine is, as plain data.

`probe()` looks at the GPUs (NVML), the torch build (asked in a child process, so this process need not
import torch), CPU, RAM and container limits, /dev/shm, disks and the environment, and returns a
HardwareReport that can be recorded as JSON and judged later. `find_gpu` looks up a GPU's published
specs (data/gpus.csv) by name, alias or NVML name.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "probe": "machine",
    "record": "machine",
    "HardwareReport": "report",
    "GpuInfo": "report",
    "GpuProcess": "report",
    "TorchInfo": "report",
    "TorchDevice": "report",
    "CpuInfo": "report",
    "MemoryInfo": "report",
    "DiskInfo": "report",
    "GpuSpec": "gpus",
    "find_gpu": "gpus",
    "get_gpu": "gpus",
    "gpu_names": "gpus",
})
