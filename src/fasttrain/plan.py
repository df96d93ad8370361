"""The Plan: a Profile resolved against the machine it will run on.

Pure: takes a validated Profile and a HardwareReport, returns what will actually happen and
why (device, precision after fallbacks, workers after caps). `train --dry-run` prints it,
`estimate` forecasts it and `train` executes it.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from fasttrain.core import arithmetic as ar
from fasttrain.core.errors import Problem, UserError
from fasttrain.core.format import fmt_bytes
from fasttrain.hardware.report import HardwareReport
from fasttrain.profiles.schema import Profile
from fasttrain.tuning.advice import workers_advice
from fasttrain.tuning.store import Measurement

# Largest training crop fasttrain accepts: 8192 px is already ~800 MB per fp32 image; beyond it a typo is likelier.
MAX_IMAGE_SIZE = 8192


def check_image_size(image_size: object, where: str = "--image-size") -> int:
    """The image size when it is a whole number of pixels in 1..MAX_IMAGE_SIZE, else a UserError. Pure.

    Whether a given model can take the size is models.registry.check_model_input's question."""
    if isinstance(image_size, bool) or not isinstance(image_size, int):
        raise UserError([Problem(where, "must be a whole number of pixels", "e.g. --image-size 224", image_size)])
    if image_size < 1:
        raise UserError([Problem(where, "must be a positive number of pixels", "e.g. --image-size 224", image_size)])
    if image_size > MAX_IMAGE_SIZE:
        raise UserError([Problem(where, f"larger than {MAX_IMAGE_SIZE} px", "training crops are usually 32-1024 px; "
                                 "e.g. --image-size 224", image_size)])
    return image_size


def fit_micro_batch(batch: int, accumulation: int, fits: Callable[[int], bool]) -> tuple[int, int] | None:
    """The largest micro-batch that divides `batch` and `fits`, with the accumulation that keeps the effective
    batch -> (micro-batch, accumulation steps); (batch, accumulation) when it fits already; None when not even
    batch 1 fits. Pure (`fits` is a footprint test, e.g. train/setup/footprint.py's). 256 -> 128 x 2 -> 64 x 4 ..."""
    for split in range(1, batch + 1):
        if batch % split == 0 and fits(batch // split):
            return batch // split, accumulation * split
    return None


@dataclass
class Plan:
    profile_name: str
    device: str                 # "cuda" or "cpu"
    device_reason: str
    precision_requested: str
    precision: str              # after fallbacks
    precision_reason: str
    channels_last: bool
    compile: bool
    compile_mode: str
    compile_reason: str
    tf32: bool
    cudnn_benchmark: bool
    fused_optimizer: bool
    batch_size: int
    accumulation_steps: int
    world_size: int
    effective_batch: int
    base_lr: float
    scaled_lr: float
    workers_requested: int
    workers: int
    workers_reason: str
    prefetch_factor: int | None
    pin_memory: bool
    persistent_workers: bool
    drop_last: bool
    image_size: int
    loader_ram_bytes: int
    ram_budget_bytes: int
    dataset_size: int | None = None
    iterations_per_epoch: int | None = None
    cpu_threads: int | None = None  # compute threads on the CPU; None: cores minus loader workers (models/setup.py)
    in_memory: bool = False     # no sample is decoded per step (tensors in memory, images decoded once into RAM)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def _precision(profile: Profile, report: HardwareReport, cuda: bool) -> tuple[str, str]:
    asked = profile.speed.precision
    if asked == "fp32":
        return "fp32", "asked"
    if not cuda:
        if asked == "fp16-mixed":
            return "fp32", "no CUDA GPU: fp16 autocast on a CPU is slower than fp32 and GradScaler is CUDA-only"
        if report.torch.cpu_bf16_fast is False:  # still runs as asked: `bench speedups` must be able to measure it
            return "bf16-mixed", ("no CUDA GPU: bf16 autocast on the CPU, which lacks AVX512-BF16/AMX, so expect it "
                                  "slower than fp32 (--set speed.precision=fp32)")
        return "bf16-mixed", "no CUDA GPU: bf16 autocast runs on the CPU (fast only with AVX512-BF16/AMX)"
    gpu = report.training_gpu()
    if asked == "bf16-mixed" and gpu is not None and gpu.bf16_supported is False:
        return "fp16-mixed", f"{gpu.name} (cc {gpu.compute_capability}) has no bf16: fp16 with GradScaler instead"
    return asked, "asked"


def _compile(profile: Profile, report: HardwareReport) -> tuple[bool, str]:
    if not profile.speed.compile:
        return False, "off in the profile"
    if not report.torch.compile_ok:
        reason = report.torch.compile_reason or "unknown reason"
        return False, f"torch.compile cannot work here: {reason}; eager instead"
    return True, "asked"


def cores_per_process_workers(cores: int, processes_per_node: int) -> int:
    """Loader workers one of N processes on a machine can have: its share of the cores minus its own main
    process (16 cores, 4 processes -> 3). Pure."""
    return max(0, cores // max(processes_per_node, 1) - 1)


def _workers(profile: Profile, report: HardwareReport, budget: int, in_memory: str | None = None,
             measured: list[Measurement] | None = None) -> tuple[int, str, str | None]:
    """-> (workers per process, why, a plan note when several processes on this machine had to share it).
    `in_memory`: why the data's samples need no decoding per step (tensors in memory, images decoded once into RAM):
    0 workers, so every core computes (a worker would only pass tensors across a process boundary).
    `measured`: loader measurements for this data (None: the user chose the count): the count doctor recommends
    too (tuning/advice.workers_advice), then the caps below."""
    asked = profile.loader.num_workers
    per_node = profile.world.gpus_per_node
    if in_memory and asked:
        return 0, f"{in_memory}: nothing to decode per step, every core computes", None
    if per_node > 1:
        return _shared_workers(profile, report, budget)
    workers, reasons = asked, []
    if measured is not None and not in_memory:
        advice = workers_advice(measured, asked, report.cores)
        workers, reasons = advice.value, [advice.text]
    if workers > report.cores:
        workers = report.cores
        reasons.append(f"capped at the {report.cores} cores of this machine")
    fitted = ar.workers_within_budget(workers, profile.loader.prefetch_factor, profile.batch_bytes, budget, per_node)
    if workers and fitted < workers:
        workers = fitted
        reasons.append(f"capped to keep loader RAM inside the {fmt_bytes(budget)} budget")
    return workers, "; ".join(reasons) or "asked", None


def _shared_workers(profile: Profile, report: HardwareReport, budget: int) -> tuple[int, str, str | None]:
    """N processes on one machine share its cores and its loader RAM budget: workers per process are capped
    by both (a preset's worker count is for one GPU). Refused only when not even 0 workers fit."""
    asked = profile.loader.num_workers
    per_node = profile.world.gpus_per_node
    one = profile.batch_bytes
    if ar.loader_ram_bytes(0, None, one, per_node) > budget:
        raise UserError([Problem(
            "loader.batch_size", f"{per_node} processes each holding one batch of {fmt_bytes(one)} need "
            f"{fmt_bytes(one * per_node)} of host RAM, over the {fmt_bytes(budget)} loader budget even with 0 workers",
            "lower loader.batch_size or --nproc-per-node, or raise hardware.ram_budget_fraction",
            profile.loader.batch_size)])
    by_cores = min(asked, cores_per_process_workers(report.cores, per_node))
    workers = ar.workers_within_budget(by_cores, profile.loader.prefetch_factor, one, budget, per_node)
    if workers >= asked:
        return asked, "asked", None
    share = f"{per_node} processes share {report.cores} cores and the {fmt_bytes(budget)} loader budget"
    return workers, share, f"workers {asked} -> {workers} per process: {share}"


def make_plan(profile: Profile, report: HardwareReport, dataset_size: int | None = None,
              extra_notes: tuple[str, ...] = (), in_memory: str | None = None,
              measured_workers: list[Measurement] | None = None) -> Plan:
    """The profile resolved against this machine. `extra_notes`: the caller's own reasons (an automatic batch's
    explanation), shown after the plan's. `in_memory`: why the data need no decoding per step; `measured_workers`:
    loader measurements for this data, None when the user set the worker count (see _workers)."""
    check_image_size(profile.loader.image_size, "loader.image_size")
    cuda = report.has_cuda
    if cuda:
        refuse_unsupported_gpu(report)
        gpu = report.training_gpu()
        device, device_reason = "cuda", gpu.name if gpu else "CUDA device"
    elif report.gpus and report.torch.cpu_only_build:
        device, device_reason = "cpu", "an NVIDIA GPU is present but this torch is a CPU-only build"
    elif report.gpus:
        device, device_reason = "cpu", "an NVIDIA GPU is present but torch cannot use it (driver/CUDA mismatch?)"
    else:
        device, device_reason = "cpu", "no CUDA GPU on this machine"
    precision, precision_reason = _precision(profile, report, cuda)
    compile_on, compile_reason = _compile(profile, report)
    budget = ar.ram_budget_bytes(report.memory.ram_total_bytes / ar.GIB, profile.hardware.ram_budget_fraction)
    workers, workers_reason, workers_note = _workers(profile, report, budget, in_memory, measured_workers)
    gpu = report.training_gpu()
    tf32 = profile.speed.tf32 and cuda and bool(gpu and gpu.tf32_supported)
    notes = [workers_note] if workers_note else []
    if profile.speed.tf32 and not tf32:
        notes.append("TF32 off: needs an Ampere or newer GPU")
    if profile.loader.pin_memory and not cuda:
        notes.append("pin_memory off: it only helps copies to a GPU")
    notes.extend(filter(None, [gpu_preset_note(profile, report, workers)]))
    plan = Plan(
        profile_name=profile.name, device=device, device_reason=device_reason,
        precision_requested=profile.speed.precision, precision=precision, precision_reason=precision_reason,
        channels_last=profile.speed.channels_last, compile=compile_on, compile_mode=profile.speed.compile_mode,
        compile_reason=compile_reason, tf32=tf32, cudnn_benchmark=profile.speed.cudnn_benchmark and cuda,
        fused_optimizer=profile.speed.fused_optimizer,  # fused kernels exist for the CPU too (bench speedups)
        batch_size=profile.loader.batch_size, accumulation_steps=profile.optim.accumulation_steps,
        world_size=profile.world_size, effective_batch=profile.effective_batch,
        base_lr=profile.optim.base_lr, scaled_lr=profile.scaled_lr,
        workers_requested=profile.loader.num_workers, workers=workers, workers_reason=workers_reason,
        prefetch_factor=profile.loader.prefetch_factor if workers else None,
        pin_memory=profile.loader.pin_memory and cuda,
        persistent_workers=profile.loader.persistent_workers and workers > 0,
        drop_last=profile.loader.drop_last, image_size=profile.loader.image_size,
        loader_ram_bytes=ar.loader_ram_bytes(workers, profile.loader.prefetch_factor, profile.batch_bytes,
                                             profile.world.gpus_per_node),
        ram_budget_bytes=budget, notes=[*notes, *extra_notes], in_memory=bool(in_memory) and workers == 0,
    )
    if dataset_size is not None:
        plan.dataset_size = dataset_size
        plan.iterations_per_epoch = profile.iterations_per_epoch(dataset_size)
    return plan


def refuse_unsupported_gpu(report: HardwareReport) -> None:
    """A GPU the torch build has no kernels for (hardware/arch.py; doctor's torch-arch finding says the same):
    every kernel would fail, so the plan stops here with the install fix. Pure."""
    from fasttrain.hardware.arch import training_mismatch
    wrong = training_mismatch(report)
    if wrong is not None:
        raise UserError([Problem("torch", wrong.reason, wrong.fix, report.torch.version)])


def gpu_preset_note(profile: Profile, report: HardwareReport, workers: int) -> str | None:
    """A profile written for a GPU, planned where torch has no CUDA GPU (doctor marks that FAIL): what the CPU
    fallback means. None when the plan runs on a GPU or the profile names none. Pure."""
    gpu = profile.hardware.gpu
    if not gpu or report.has_cuda:
        return None
    why = "torch cannot use this machine's" if report.gpus else "this machine has none"
    cores = f"; its {workers} loader worker(s) leave the compute {workers} core(s) fewer" if workers else ""
    return (f"{profile.name or 'the profile'} is for a {gpu} GPU and {why}: the plan falls back to the CPU, a large "
            f"slow-down (the Kaggle note measured 12x for GPU over CPU){cores}; "
            "--profile cpu plans for this machine")
