"""Gather for `fasttrain estimate`: profile, target machine, model cost, device ceilings, loader sample.

The forecast is for the machine the PROFILE describes (its GPU from the spec file, its cores and RAM),
not for the machine estimate runs on, unless the profile has no GPU (then: this machine, measured), or
--measure asks to check the forecast here. Imports torch only through cost.py / cpu_ceiling.py.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttrain.core import arithmetic as ar
from fasttrain.estimate import calibration
from fasttrain.hardware import gpus
from fasttrain.core.errors import Problem, UserError
from fasttrain.estimate.forecast import Forecast, HostWarning, LoaderSample, forecast
from fasttrain.plan import Plan, check_image_size, make_plan
from fasttrain.profiles.schema import Profile
from fasttrain.hardware.report import CpuInfo, GpuInfo, HardwareReport, MemoryInfo, TorchInfo
from fasttrain.core.format import fmt_bytes

IMAGENET_TRAIN_SIZE = 1_281_167  # the default data set size: ImageNet-1k train, as in the field notes


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


# Upper bounds: far past any real run (LAION-5B is 5.8e9 samples); beyond them a typo is likelier, and the
# arithmetic of the forecast would lose its meaning.
MAX_DATASET_SIZE = 10**12
MAX_EPOCHS = 100_000


def validate_sizes(dataset_size: int | None, image_size: int | None, epochs: int | None, num_classes: int) -> None:
    from fasttrain.models.registry import check_num_classes
    problems = []
    if dataset_size is not None and dataset_size <= 0:
        problems.append(Problem("--dataset-size", "must be a positive number of training samples",
                                "e.g. --dataset-size 1281167 (ImageNet-1k)", dataset_size))
    elif dataset_size is not None and dataset_size > MAX_DATASET_SIZE:
        problems.append(Problem("--dataset-size", f"more than {MAX_DATASET_SIZE:,} training samples",
                                "e.g. --dataset-size 1281167 (ImageNet-1k)", dataset_size))
    if image_size is not None:
        try:
            check_image_size(image_size)
        except UserError as exc:
            problems.extend(exc.problems)
    if epochs is not None and not 1 <= epochs <= MAX_EPOCHS:
        problems.append(Problem("--epochs", f"must be a whole number from 1 to {MAX_EPOCHS:,}", "", epochs))
    try:
        check_num_classes(num_classes)
    except UserError as exc:
        problems.extend(exc.problems)
    if problems:
        raise UserError(problems)


def resolve_profile(ref: str, req: Request) -> Any:
    from fasttrain.profiles import presets
    flags: dict[str, tuple[str, Any]] = {}
    if req.image_size_flag is not None:
        flags["loader.image_size"] = ("--image-size", req.image_size_flag)
    if req.epochs_flag is not None:
        flags["optim.epochs"] = ("--epochs", req.epochs_flag)
    flags.update(req.batch_flags)
    flags.update(req.world_flags)
    return presets.resolve(ref, sets=req.sets, env=os.environ, flags=flags, what_if=True)


def host_warning(resolved: Any) -> HostWarning | None:
    """The over-budget loader RAM a what-if resolution let through (profiles/rules.py), as the forecast's
    bottleneck; None when the plan's loader RAM fits."""
    from fasttrain.profiles.rules import HOST_RAM_WHAT_IF
    for note in resolved.notes:
        if note.severity == HOST_RAM_WHAT_IF:
            return HostWarning(f"{note.where}: {note.message}", note.fix)
    return None


def plain_notes(resolved: Any) -> list[str]:
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
               force_local: bool = False, in_memory: str | None = None) -> Target:
    """Plan + ceilings for the profile's GPU (or --gpu), or for this machine when there is no GPU to price.
    `in_memory`: data decoded once into RAM on this CPU (only this machine's CPU plan takes it)."""
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
        spec = gpus.find_gpu(local_gpu.name)
        if spec is not None:
            plan = make_plan(profile, local, dataset_size)
            dev = calibration.gpu_ceilings(spec, plan.precision, plan.tf32, plan.channels_last)
            dev = dataclasses.replace(dev, memory_bytes=local_gpu.memory_total_bytes)
            return Target(plan, dev, local.memory.ram_total_bytes, "this machine", local.cpu.logical_cores)
    from fasttrain.estimate import cpu_ceiling
    plan = make_plan(profile, local, dataset_size, in_memory=in_memory)
    ceiling = cpu_ceiling.measure(cpu_threads_for(plan), cpu_dtype(plan), plan.channels_last)
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


_COSTS: dict[tuple, Any] = {}


def model_cost(model: str, image_size: int, num_classes: int, precision: str) -> Any:
    """cost.model_cost, remembered per process: --compare prices many plans of one model."""
    from fasttrain.estimate import cost
    key = (model, image_size, num_classes, precision)
    if key not in _COSTS:
        from fasttrain.models.registry import check_model_input
        check_model_input(model, image_size, num_classes)  # a size the model cannot take: exit 2, with sizes it takes
        _COSTS[key] = cost.model_cost(model, image_size, num_classes=num_classes, precision=precision)
    return _COSTS[key]


def forecast_for(profile: Profile, req: Request, local: HardwareReport | None, gpu_flag: str | None = None,
                 force_local: bool = False, warning: HostWarning | None = None,
                 estimate_loader: bool = True) -> tuple[Forecast, Target]:
    """The forecast of the plan on its target. Without --data, a GPU target's input pipeline is estimated from
    this CPU's decode rate (decode_rate.py: measured once, cached); estimate_loader=False skips that (train's
    dashboard forecast, which wants the GPU's images/s only)."""
    target = target_for(profile, gpu_flag, local, req.dataset_size, force_local, req.in_memory)
    cost = model_cost(req.model, target.plan.image_size, req.num_classes, target.plan.precision)
    priced, price_source, unpriced = (profile, None, None) if force_local else priced_for(profile, gpu_flag)
    loader = req.loader
    if loader is None and estimate_loader and not force_local and target.device.kind == "gpu":
        from fasttrain.estimate import decode_rate
        loader = decode_rate.per_core_rate(target.plan.image_size, profile.augment)
    fc = forecast(target.plan, priced, cost, target.device, req.dataset_size, profile.optim.epochs,
                  target.host_ram_bytes, calibration.load()["memory"], loader, cores=target.cores,
                  host_warning=None if force_local else warning)
    fc.cost["price_source"] = price_source
    if unpriced:
        fc.unknown.append(unpriced)
    return fc, target


def priced_for(profile: Profile, gpu_flag: str | None) -> tuple[Profile, str | None, str | None]:
    """(the profile with the hourly prices of the GPU the forecast is for, where they come from, what is unknown).

    The profile's price fields are for its own machine: kept for its own GPU. Another GPU (--gpu, --compare gpus)
    is priced per GPU from data/gpu_prices.csv x GPUs per machine; without a row, unknown."""
    from fasttrain.estimate import prices
    hw = profile.hardware
    own = gpus.find_gpu(hw.gpu) if hw.gpu else None
    spec = gpus.get_gpu(gpu_flag) if gpu_flag else own
    if spec is None or spec is own:
        priced = hw.price_on_demand_per_hour is not None or hw.price_spot_per_hour is not None
        return profile, (f"profile {profile.name}" if priced else None), None
    row = prices.load_prices().get(spec.name)
    on, spot = prices.machine_prices(row, profile.world.gpus_per_node)
    hw = hw.model_copy(update={"price_on_demand_per_hour": on, "price_spot_per_hour": spot})
    source = f"{prices.PRICE_FILE}: {row.provider}" if row else None
    unpriced = None if row else f"hourly price of {spec.name} (no row in {prices.PRICE_FILE})"
    return profile.model_copy(update={"hardware": hw}), source, unpriced


def check_full_batch(plan: Plan) -> None:
    """The same refusal as `train`: a batch larger than the training set leaves an epoch with no full batch
    (drop_last), so there is nothing to forecast; exit 2 instead of printing 0 iterations."""
    if plan.iterations_per_epoch == 0:
        devices = f" x {plan.world_size} devices" if plan.world_size > 1 else ""
        raise UserError([Problem("loader.batch_size", f"larger than the {plan.dataset_size} training samples"
                                 f"{' (batch ' + str(plan.batch_size) + devices + ')' if devices else ''}, "
                                 "so an epoch has no full batch", "lower it with --set loader.batch_size=N",
                                 plan.batch_size)])


def sample_data(data: Path, profile: Profile, decoded_once: bool = False) -> tuple[int, LoaderSample]:
    """(training images, the loader's measured rate). `decoded_once`: train decodes the folder once into RAM on
    this machine (decoded_here): the rate is then the batched augmentation's."""
    from fasttrain.estimate import loader_sample
    count, files = loader_sample.scan(data)
    if decoded_once:
        return count, loader_sample.measure_batched(files, profile.augment, profile.loader.image_size,
                                                    profile.loader.batch_size)
    return count, loader_sample.measure(files, profile.augment, profile.loader.image_size)


def decoded_here(data: Path, profile: Profile, local: HardwareReport | None, gpu_flag: str | None) -> str | None:
    """train's words for a folder it decodes once into RAM on this machine (a CPU target), else None."""
    if gpu_flag or profile.hardware.gpu or not data.is_dir():
        return None
    from fasttrain.datasets.decoded import would_decode
    from fasttrain.datasets.shards import is_prepared
    if is_prepared(data):
        return None
    try:
        decoded, words = would_decode(data, profile, local or local_report())
    except UserError:
        return None
    return words if decoded else None


def compare_rows(kind: str, profile: Profile, req: Request, local: HardwareReport | None) -> list[dict[str, Any]]:
    """One forecast row per shipped preset, or per GPU of the spec file (the user's plan on each)."""
    rows = []
    if kind == "gpus":
        for name in gpus.gpu_names():
            fc, _t = forecast_for(profile, req, local, gpu_flag=name)
            rows.append(compare_row(name, fc))
    else:
        from fasttrain.profiles.files import preset_names
        # The same work on every preset: this plan's image size and epochs, each preset's own machine and settings.
        same_work = dataclasses.replace(req, sets=[], image_size_flag=profile.loader.image_size,
                                        epochs_flag=profile.optim.epochs)
        for name in preset_names():
            res = resolve_profile(name, same_work)
            fc, _t = forecast_for(res.profile, req, local, warning=host_warning(res))
            rows.append(compare_row(name, fc))
    rows.sort(key=lambda r: (r["total_s"] is None, r["total_s"] or 0.0, r["name"]))
    return rows


def compare_row(name: str, fc: Forecast) -> dict[str, Any]:
    mem = fc.memory
    if mem.fits is None:
        verdict = "unknown VRAM"
    elif mem.fits:
        verdict = f"fits {fmt_bytes(mem.total)} / {fmt_bytes(mem.capacity)}"
    else:
        verdict = f"OOM {fmt_bytes(mem.total)} / {fmt_bytes(mem.capacity)}, max batch {mem.largest_batch}"
    return {"name": name, "device": fc.device["name"], "batch_size": fc.schedule["batch_size"],
            "precision": fc.schedule["precision"], "images_per_s": fc.speed["images_per_s"],
            "epoch_s": fc.time["epoch_s"], "total_s": fc.time["total_s"], "memory_fits": mem.fits,
            "memory_verdict": verdict, "on_demand_per_run": fc.cost["on_demand_per_run"],
            "spot_per_run": fc.cost["spot_per_run"], "bottleneck": fc.bottleneck["name"],
            "unknown": fc.device["unknown"]}
