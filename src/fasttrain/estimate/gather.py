"""Gather for `fasttrain estimate`: profile, target machine, model cost, device ceilings, loader sample.

The forecast is for the machine the PROFILE describes (its GPU from the spec file, its cores and RAM),
not for the machine estimate runs on, unless the profile has no GPU (then: this machine, measured), or
--measure asks to check the forecast here. Imports torch only through cost.py / cpu_ceiling.py.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fasttrain.core import arithmetic as ar
from fasttrain.estimate import calibration
from fasttrain.estimate.forecast import Forecast, HostWarning, LoaderSample, forecast
from fasttrain.estimate.prices import priced_for
from fasttrain.hardware import gpus
from fasttrain.hardware.report import CpuInfo, GpuInfo, HardwareReport, MemoryInfo, TorchInfo
from fasttrain.plan import Plan, make_plan
from fasttrain.profiles.schema import Profile

if TYPE_CHECKING:
    from fasttrain.estimate.cost import ModelCost
    from fasttrain.profiles.presets import Resolved

IMAGENET_TRAIN_SIZE = 1_281_167  # the default data set size: ImageNet-1k train, as in the field notes
IMAGENET_VAL_SIZE = 50_000       # and the images it validates after each epoch: ImageNet-1k val
# What the forecast says of its data when given none: the figures are ImageNet's, and a newcomer with 60,000 small
# images must see that before the hours it prices (issue 43).
ASSUMED_DATA = f"ImageNet-1k train, {IMAGENET_TRAIN_SIZE:,} images (assumed: no --data or --dataset-size)"


def val_size_for(dataset_size: int | None) -> int:
    """Images validated after each epoch when no data are given: ImageNet-1k's val set by default; for
    --dataset-size N training images, the share `train` splits off a folder without a val/
    (image_folder.VAL_FRACTION of all its images). Pure."""
    if dataset_size is None:
        return IMAGENET_VAL_SIZE
    from fasttrain.datasets.image_folder import VAL_FRACTION
    return max(1, round(dataset_size * VAL_FRACTION / (1 - VAL_FRACTION)))


@dataclass
class Request:
    """What the user asked, validated."""

    model: str
    num_classes: int
    dataset_size: int
    dataset_size_source: str
    epochs_flag: int | None
    image_size_flag: int | None
    sets: list[str]
    gpu: str | None
    loader: LoaderSample | None
    # --data decoded once into RAM on this CPU (datasets/decoded.py): why no sample is decoded per step, else None
    in_memory: str | None = None
    batch_flags: dict[str, tuple[str, Any]] = field(default_factory=dict)  # --batch-size N or auto
    world_flags: dict[str, tuple[str, Any]] = field(default_factory=dict)  # --nproc-per-node / --nnodes
    val_size: int | None = None  # images validated after each epoch (None: unknown, left out of the total)


def resolve_profile(ref: str, req: Request) -> Resolved:
    from fasttrain.profiles import presets
    flags: dict[str, tuple[str, Any]] = {}
    if req.image_size_flag is not None:
        flags["loader.image_size"] = ("--image-size", req.image_size_flag)
    if req.epochs_flag is not None:
        flags["optim.epochs"] = ("--epochs", req.epochs_flag)
    flags.update(req.batch_flags)
    flags.update(req.world_flags)
    return presets.resolve(ref, sets=req.sets, env=os.environ, flags=flags, what_if=True)


def host_warning(resolved: Resolved) -> HostWarning | None:
    """The over-budget loader RAM a what-if resolution let through (profiles/rules.py), as the forecast's
    bottleneck; None when the plan's loader RAM fits."""
    from fasttrain.profiles.rules import HOST_RAM_WHAT_IF
    for note in resolved.notes:
        if note.severity == HOST_RAM_WHAT_IF:
            return HostWarning(f"{note.where}: {note.message}", note.fix)
    return None


def plain_notes(resolved: Resolved) -> list[str]:
    """The profile's notes to print, less the host-RAM what-if (the bottleneck line says it, with its fix)."""
    from fasttrain.profiles.rules import HOST_RAM_WHAT_IF
    return [n.line() for n in resolved.notes if n.severity != HOST_RAM_WHAT_IF]


def gpu_report(profile: Profile, spec: gpus.GpuSpec, vram_bytes: int) -> HardwareReport:
    """The profile's machine as a HardwareReport, so make_plan resolves precision/TF32/workers for IT."""
    gpu = GpuInfo(index=0, name=spec.name, memory_total_bytes=vram_bytes, compute_capability=spec.compute_capability,
                  bf16_supported=spec.bf16_supported, tf32_supported=spec.tf32_supported)
    n = profile.world.gpus_per_node
    torch_info = TorchInfo(cpu_only_build=False, cuda_available=True, device_count=n, compile_ok=True,
                           compile_reason="assumed to work on the target machine")
    ram = int(profile.hardware.host_ram_gb * ar.GIB)
    return HardwareReport(gpus=[gpu.model_copy(update={"index": i}) for i in range(n)], torch=torch_info,
                          cpu=CpuInfo(logical_cores=profile.hardware.cpu_cores),
                          memory=MemoryInfo(ram_total_bytes=ram, ram_available_bytes=ram))


def local_report() -> HardwareReport:
    from fasttrain.hardware import machine as hardware
    return hardware.probe()


@dataclass
class Target:
    plan: Plan
    device: calibration.DeviceCeilings
    host_ram_bytes: int
    where: str   # "profile" (the profile's GPU), "--gpu", or "this machine"
    cores: int | None = None   # the machine's CPU cores (the profile's, or this machine's)


def target_for(profile: Profile, gpu_flag: str | None, local: HardwareReport | None, dataset_size: int,
               force_local: bool = False, in_memory: str | None = None, quick: bool = False) -> Target:
    """Plan + ceilings for the profile's GPU (or --gpu), or for this machine when there is no GPU to price.
    `in_memory`: data decoded once into RAM on this CPU (only this machine's CPU plan takes it).
    `quick`: this CPU's ceilings timed now, over short windows (a run's own forecast: cpu_ceiling.QUICK_WINDOW_S)."""
    gpu_name = None if force_local else (gpu_flag or profile.hardware.gpu)
    if gpu_name:
        spec = gpus.get_gpu(gpu_name, where="--gpu" if gpu_flag else "hardware.gpu")
        usable = None if gpu_flag else profile.hardware.vram_gb  # the profile's usable GiB, for its own GPU only
        vram = int(usable * ar.GIB) if usable else spec.memory_bytes
        report = gpu_report(profile, spec, vram or 0)
        plan = make_plan(profile, report, dataset_size)
        dev = calibration.gpu_ceilings(spec, plan.precision, plan.tf32, plan.channels_last)
        dev = dataclasses.replace(dev, memory_bytes=vram)
        return Target(plan, dev, report.memory.ram_total_bytes, "--gpu" if gpu_flag else "profile",
                      profile.hardware.cpu_cores)
    if local is None:
        local = local_report()
    local_gpu = local.training_gpu()
    if local_gpu is not None:
        local_spec = gpus.find_gpu(local_gpu.name)  # None: a GPU the spec table does not list
        if local_spec is not None:
            plan = make_plan(profile, local, dataset_size)
            dev = calibration.gpu_ceilings(local_spec, plan.precision, plan.tf32, plan.channels_last)
            dev = dataclasses.replace(dev, memory_bytes=local_gpu.memory_total_bytes)
            return Target(plan, dev, local.memory.ram_total_bytes, "this machine", local.cpu.logical_cores)
    from fasttrain.estimate import cpu_ceiling
    plan = make_plan(profile, local, dataset_size, in_memory=in_memory)
    window_s, reuse_s = (cpu_ceiling.QUICK_WINDOW_S, 0.0) if quick else (cpu_ceiling.WINDOW_S, cpu_ceiling.REUSE_S)
    ceiling = cpu_ceiling.measure(cpu_threads_for(plan), cpu_dtype(plan), plan.channels_last, window_s, reuse_s)
    dev = calibration.cpu_ceilings(ceiling.peak_flops, ceiling.bandwidth, local.memory.ram_total_bytes,
                                   conv_weight_s_per_byte=ceiling.conv_weight_s_per_byte)
    return Target(plan, dev, local.memory.ram_total_bytes, "this machine", local.cpu.logical_cores)


def cpu_threads_for(plan: Plan) -> int | None:
    """The compute threads `train` will use on this CPU (cores minus loader workers), unless OMP_NUM_THREADS says."""
    if "OMP_NUM_THREADS" in os.environ:
        return None
    from fasttrain.models.setup import cpu_threads
    return cpu_threads(plan.workers)


def cpu_dtype(plan: Plan) -> str:
    return "bfloat16" if plan.precision == "bf16-mixed" else "float32"


_COSTS: dict[tuple[str, int, int, str], ModelCost] = {}


def model_cost(model: str, image_size: int, num_classes: int, precision: str) -> ModelCost:
    """cost.model_cost, remembered per process: --compare prices many plans of one model, and a run's footprint
    check and its forecast price the same one (0.4-0.6 s each for resnet18 on a 2-core CPU)."""
    from fasttrain.estimate import cost
    key = (model, image_size, num_classes, precision)
    if key not in _COSTS:
        from fasttrain.models.registry import check_model_input
        check_model_input(model, image_size, num_classes)  # a size the model cannot take: exit 2, with sizes it takes
        _COSTS[key] = cost.model_cost(model, image_size, num_classes=num_classes, precision=precision)
    return _COSTS[key]


def forecast_for(profile: Profile, req: Request, local: HardwareReport | None, gpu_flag: str | None = None,
                 force_local: bool = False, warning: HostWarning | None = None,
                 estimate_loader: bool = True, quick: bool = False) -> tuple[Forecast, Target]:
    """The forecast of the plan on its target. Without --data, a GPU target's input pipeline is estimated from
    this CPU's decode rate (decode_rate.py: measured once, cached); estimate_loader=False skips that (train's
    dashboard forecast, which wants the GPU's images/s only); quick=True times this CPU over short windows (the
    same run's forecast: it informs, and every second before the first step counts)."""
    target = target_for(profile, gpu_flag, local, req.dataset_size, force_local, req.in_memory, quick)
    cost = model_cost(req.model, target.plan.image_size, req.num_classes, target.plan.precision)
    priced, price_source, unpriced = (profile, None, None) if force_local else priced_for(profile, gpu_flag)
    loader = req.loader
    if loader is None and estimate_loader and not force_local and target.device.kind == "gpu":
        from fasttrain.estimate import decode_rate
        loader = decode_rate.per_core_rate(target.plan.image_size, profile.augment)
    fc = forecast(target.plan, priced, cost, target.device, req.dataset_size, profile.optim.epochs,
                  target.host_ram_bytes, calibration.load()["memory"], loader, cores=target.cores,
                  host_warning=None if force_local else warning, val_size=req.val_size)
    fc.cost["price_source"] = price_source
    if unpriced:
        fc.unknown.append(unpriced)
    return fc, target
