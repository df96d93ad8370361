"""Which GPUs a torch build has kernels for, from `torch.cuda.get_arch_list()`, and the build that fits one it lacks.

A build compiled for sm_XY runs on a GPU of compute capability X.y with y >= Y (the same major version: NVIDIA's
binary compatibility rule); sm_XYa only on exactly X.Y (arch-specific features); compute_XY is PTX, compiled
by the driver for any GPU of capability X.Y or newer. A GPU none of these cover fails every kernel with "no
kernel image is available for execution on the device" (torch 2.14.1+cu130 has no sm_70: a V100 cannot run it).
Which official wheel still has a capability is data (data/cuda_wheels.csv, with the sources). Pure, no torch.
"""
from __future__ import annotations

import csv
import functools
import re
from dataclasses import dataclass
from importlib import resources

from fasttrain.hardware.report import GpuInfo, HardwareReport

WHEEL_INDEX = "https://download.pytorch.org/whl/"
_ARCH = re.compile(r"^(sm|compute)_(\d+)(\d)([af]?)$")


@dataclass(frozen=True)
class Wheel:
    index: str             # "cu126": the folder of download.pytorch.org/whl
    cuda: str              # "12.6"
    arch_list: tuple[str, ...]


@dataclass(frozen=True)
class ArchMismatch:
    """A GPU that torch can see but this build has no kernels for: the one reason and its fix."""

    gpu: str
    capability: str
    reason: str
    fix: str


def _parse(arch: str) -> tuple[str, int, int, str] | None:
    """'sm_86' -> ('sm', 8, 6, ''); 'sm_100a' -> ('sm', 10, 0, 'a'); 'compute_120' -> ('compute', 12, 0, '')."""
    match = _ARCH.match(arch.strip())
    if match is None:
        return None
    kind, major, minor, suffix = match.groups()
    return kind, int(major), int(minor), suffix


def _capability(text: str) -> tuple[int, int] | None:
    try:
        major, minor = (int(part) for part in text.split(".")[:2])
    except ValueError:
        return None
    return major, minor


def runs_on(arch_list: list[str] | tuple[str, ...], capability: str) -> bool:
    """Whether a build compiled for `arch_list` has kernels a GPU of `capability` ("7.0") can run. Pure."""
    cc = _capability(capability)
    if cc is None:
        return True  # nothing known to judge by: say nothing rather than refuse
    for arch in arch_list:
        parsed = _parse(arch)
        if parsed is None:
            continue
        kind, major, minor, suffix = parsed
        if kind == "compute" and cc >= (major, minor):
            return True
        if kind == "sm" and suffix == "a" and cc == (major, minor):
            return True
        if kind == "sm" and suffix != "a" and cc[0] == major and cc[1] >= minor:
            return True
    return False


@functools.lru_cache(maxsize=1)
def wheels() -> tuple[Wheel, ...]:
    """The official CUDA wheels of torch and the architectures each has (data/cuda_wheels.csv), oldest CUDA first."""
    with (resources.files("fasttrain") / "data" / "cuda_wheels.csv").open(encoding="utf-8") as fh:
        rows = [Wheel(r["index"], r["cuda"], tuple(r["arch_list"].split())) for r in csv.DictReader(fh)]
    return tuple(sorted(rows, key=lambda w: tuple(int(p) for p in w.cuda.split("."))))


def wheel_for(capability: str) -> Wheel | None:
    """The newest official wheel with kernels for this capability, or None when none has them."""
    fitting = [w for w in wheels() if runs_on(w.arch_list, capability)]
    return fitting[-1] if fitting else None


def install_command(wheel: Wheel, torch_version: str | None) -> str:
    """The pip command that replaces this torch with the same release built for `wheel` (torchvision follows)."""
    base = (torch_version or "").split("+")[0]
    pin = f"torch=={base}" if base else "torch"
    return f"pip install --force-reinstall {pin} torchvision --index-url {WHEEL_INDEX}{wheel.index}"


def _mismatch(gpu: GpuInfo, arch_list: list[str], torch_version: str | None, cuda: str | None) -> ArchMismatch | None:
    cc = gpu.compute_capability
    if not cc or runs_on(arch_list, cc):
        return None
    build = f"torch {torch_version or '?'} (CUDA {cuda or '?'})"
    reason = (f"{build} has no kernels for {gpu.name} (compute capability {cc}): it was built for "
              f"{' '.join(arch_list)}, so every CUDA kernel would fail with \"no kernel image is available\"")
    wheel = wheel_for(cc)
    if wheel is None:
        fix = (f"no official PyTorch wheel has kernels for compute capability {cc}: build torch from source with "
               f"TORCH_CUDA_ARCH_LIST={cc}, or use a newer GPU")
    else:
        fix = (f"install the PyTorch build for CUDA {wheel.cuda}, which still has sm_{cc.replace('.', '')}: "
               f"{install_command(wheel, torch_version)}")
    return ArchMismatch(gpu.name, cc, reason, fix)


def arch_mismatches(report: HardwareReport) -> list[ArchMismatch]:
    """Every GPU torch can see that its build has no kernels for; [] when the build's list is unknown (a report
    recorded before fasttrain asked, a CPU-only build) or every GPU is covered. Pure."""
    arch_list = report.torch.arch_list
    if not arch_list or not report.has_cuda:
        return []
    found = (_mismatch(g, arch_list, report.torch.version, report.torch.cuda_version)
             for g in report.gpus if g.visible_to_torch is not False)
    return [m for m in found if m is not None]


def training_mismatch(report: HardwareReport) -> ArchMismatch | None:
    """The mismatch of the GPU training runs on (report.training_gpu()), or None."""
    gpu = report.training_gpu()
    if gpu is None or not report.torch.arch_list:
        return None
    return _mismatch(gpu, report.torch.arch_list, report.torch.version, report.torch.cuda_version)
