"""Run as `python -m fasttrain.hardware.torch_child`: import torch, print what it sees as one JSON line.

The doctor runs this in a child process, for three reasons: `import torch` (~2.5 s) then overlaps the
other probes; a torch that crashes or hangs while loading CUDA becomes a finding, not a dead doctor;
and the CUDA context the child creates goes away with it, so it never shows up as "another process
holding GPU memory". Standard library and torch only: importing fasttrain's models here would add
their start-up cost to the child.
"""
from __future__ import annotations

import json
import sys
from types import ModuleType
from typing import Any


def _nccl(torch: ModuleType) -> str | None:
    try:
        version = torch.cuda.nccl.version()
    except Exception:  # a build without NCCL, or no CUDA at all
        return None
    if isinstance(version, tuple):
        return ".".join(str(v) for v in version)
    return str(version)


def _devices(torch: ModuleType, free: str) -> list[dict[str, Any]]:
    """Each device as torch numbers it. free: "all" (this child: the contexts it makes go away with it),
    "current" (a training process: only the device it trains on, whose context it holds anyway) or "none"."""
    out = []
    current = torch.cuda.current_device()
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        uuid = getattr(props, "uuid", None)
        read = free == "all" or (free == "current" and i == current)
        out.append({
            "index": i,
            "name": props.name,
            "total_memory": int(props.total_memory),
            "capability": f"{props.major}.{props.minor}",
            "uuid": f"GPU-{uuid}" if uuid is not None and not str(uuid).startswith("GPU-") else str(uuid) or None,
            # what the driver says is free for this process now: a MIG slice's, less what a desktop holds
            "free_memory": int(torch.cuda.mem_get_info(i)[0]) if read else None,
        })
    return out


def collect(free: str = "all") -> dict:
    """What torch sees; `free`: whose free memory to read (see _devices)."""
    import torch

    info: dict = {
        "version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "hip_version": getattr(torch.version, "hip", None),
        "cudnn_version": None,
        "cuda_available": False,
        "device_count": 0,
        "nccl_version": None,
        "devices": [],
        "current_device": 0,
        "cpu_capability": None,
        "arch_list": None,
        "errors": [],
    }
    try:
        info["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    except Exception as exc:  # older torch
        info["errors"].append(f"cpu capability: {exc}")
    try:
        info["cudnn_version"] = torch.backends.cudnn.version()
    except Exception as exc:
        info["errors"].append(f"cudnn: {exc}")
    try:  # the architectures the build has kernels for: known without a GPU (hardware/arch.py judges them)
        info["arch_list"] = list(torch.cuda.get_arch_list()) if info["cuda_version"] else None
    except Exception as exc:
        info["errors"].append(f"arch list: {exc}")
    try:
        info["cuda_available"] = bool(torch.cuda.is_available())
        if info["cuda_available"]:
            info["device_count"] = torch.cuda.device_count()
            info["devices"] = _devices(torch, free)
            info["current_device"] = torch.cuda.current_device()  # 0 here; a worker's own GPU in-process
            info["nccl_version"] = _nccl(torch)
    except Exception as exc:  # e.g. the driver is older than the CUDA the wheel was built for
        info["errors"].append(f"cuda: {type(exc).__name__}: {exc}")
    return info


def main() -> None:
    sys.stdout.write(json.dumps(collect()) + "\n")


if __name__ == "__main__":
    main()
