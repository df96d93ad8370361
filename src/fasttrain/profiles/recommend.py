"""Which preset fits this machine, and the settings `doctor` recommends for it. Pure: report in, answer out.

best_preset() (preset_match.py) is what `train` uses when --profile is omitted. recommend() starts from that
preset and tunes the keys that depend on the machine: batch by VRAM (data/batch_by_vram.csv, from the
gcp-efficientnet note), workers as `bench loader` measured them here (else floor(0.75 x cores)) capped by the
loader RAM budget, precision by compute capability, compile / channels_last / TF32 where they help.
"""
from __future__ import annotations

import csv
import math
import re
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from fasttrain.core import arithmetic as ar
from fasttrain.core.format import fmt_bytes
from fasttrain.hardware.report import GpuInfo, HardwareReport
from fasttrain.profiles import presets
from fasttrain.profiles.preset_match import best_preset, model_token, name_tokens
from fasttrain.profiles.schema import HardwareSpec, Profile
from fasttrain.tuning.advice import advise, describe, workers_advice
from fasttrain.tuning.store import Measurement

# ---- recommend(): the settings for this machine --------------------------------------------------------------

VRAM_MATCH = 0.10  # within 10%: the preset was written for a GPU with this memory
VRAM_ROW_SLACK = 1.1  # a "16 GB" card reports 16.1 GB (15360 MiB); 40 GB -> 42.9 GB: round-ish sizes match rows
WORKER_FRACTION = 0.75  # of the usable cores (A10G note: 16 cores -> 12 workers)
SHM_SHARE = 0.5  # the loader may fill at most half of /dev/shm (doctor warns above that)


@dataclass
class Recommendation:
    """The preset to extend and every tuned key (dotted) with the reason for its value."""

    preset: str
    settings: dict[str, Any] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    changes: dict[str, Any] = field(default_factory=dict)  # only the keys whose value differs from the preset
    notes: list[str] = field(default_factory=list)

    def set(self, key: str, value: bool | int | float | str | None, reason: str) -> None:
        self.settings[key] = value
        self.reasons[key] = reason

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BatchRow:
    device: str
    vram_gb: float | None
    batch_size: int
    source: str


@lru_cache(maxsize=1)
def batch_table() -> tuple[BatchRow, ...]:
    with (resources.files("fasttrain") / "data" / "batch_by_vram.csv").open(encoding="utf-8") as fh:
        return tuple(BatchRow(r["device"], float(r["vram_gb"]) if r["vram_gb"] else None, int(r["batch_size"]),
                              r["source"]) for r in csv.DictReader(fh))


def batch_for_vram(vram_bytes: int | None) -> BatchRow:
    """The table row for this much GPU memory (None = CPU): the largest row not above it, else the smallest."""
    rows = batch_table()
    if vram_bytes is None:
        return next(r for r in rows if r.device == "cpu")
    gpu_rows = sorted((r for r in rows if r.device == "gpu"), key=lambda r: r.vram_gb or 0)
    fitting = [r for r in gpu_rows if (r.vram_gb or 0) <= vram_bytes / 1e9 * VRAM_ROW_SLACK]
    return fitting[-1] if fitting else gpu_rows[0]


def _same_machine(gpu: GpuInfo | None, hw: HardwareSpec) -> bool:
    """The preset was written for this very GPU (chip and memory), or it is the CPU preset on a CPU machine."""
    if gpu is None:
        return hw.gpu is None
    token = model_token(hw.gpu or "")
    vram_gib = gpu.memory_total_bytes / 2**30
    return (token is not None and token in name_tokens(gpu.name) and hw.vram_gb is not None
            and abs(vram_gib - hw.vram_gb) <= VRAM_MATCH * hw.vram_gb)


def _cpu_precision(report: HardwareReport, preset: Profile) -> tuple[str, str]:
    """The cpu preset's measured choice where this CPU can run it fast; fp32 where bf16 would be emulated."""
    asked = preset.speed.precision
    if asked == "bf16-mixed" and not report.torch.cpu_bf16_fast:
        return "fp32", "CPU without AVX512-BF16/AMX: bf16 autocast would be slower than fp32"
    if asked == "fp16-mixed":
        return "fp32", "CPU: fp16 autocast and GradScaler are for GPUs"
    return asked, f"the {preset.name} preset's measured setting" + (
        " (this CPU has AVX512-BF16/AMX)" if asked == "bf16-mixed" else "")


def _precision(gpu: GpuInfo) -> tuple[str, str]:
    cc = float(gpu.compute_capability) if gpu.compute_capability else None
    if cc is None:
        return "fp16-mixed", "compute capability unknown: fp16-mixed works on every tensor-core GPU"
    if cc >= 8.0:
        return "bf16-mixed", (f"compute capability {cc:g} >= 8.0: bf16 runs at the fp16 tensor-core rate without "
                              "GradScaler or fp16 overflow (the NaN losses of the laptop note)")
    if cc >= 7.0:
        return "fp16-mixed", f"compute capability {cc:g}: tensor cores do fp16, not bf16 (needs 8.0)"
    return "fp32", f"compute capability {cc:g} < 7.0: no tensor cores, mixed precision gains little"


def _hardware(rec: Recommendation, report: HardwareReport, gpu: GpuInfo | None, hw: HardwareSpec,
              same_chip: bool) -> None:
    host_gib = report.memory.ram_total_bytes / 2**30
    rec.set("hardware.host_ram_gb", math.floor(host_gib), f"this machine: {host_gib:.1f} GiB RAM (rounded down)")
    rec.set("hardware.cpu_cores", report.cores, f"this machine: {report.cores} usable cores")
    if gpu is None:
        return
    vram = round(gpu.memory_total_bytes / 2**30, 1)
    rec.set("hardware.gpu", hw.gpu if same_chip else re.sub(r"^(NVIDIA|Tesla)\s+", "", gpu.name),
            f"this machine: {gpu.name}")
    rec.set("hardware.vram_gb", vram, f"this machine: {vram:g} GiB")
    if gpu.compute_capability:
        rec.set("hardware.compute_capability", gpu.compute_capability, "this machine")
        rec.set("hardware.bf16", bool(gpu.bf16_supported), "compute capability >= 8.0")
    if not same_chip:
        rec.set("hardware.price_on_demand_per_hour", None, f"the preset's prices are for a {hw.gpu}")
        rec.set("hardware.price_spot_per_hour", None, f"the preset's prices are for a {hw.gpu}")


def _batch(rec: Recommendation, gpu: GpuInfo | None, preset: Profile, same: bool) -> int:
    row = batch_for_vram(gpu.memory_total_bytes if gpu else None)
    if same:
        batch, why = preset.loader.batch_size, ("the preset's own batch: the preset was written for this GPU (or "
                                                f"CPU), from its source note; the generic table says {row.batch_size}")
    else:
        batch, why = row.batch_size, f"batch by memory table: {row.source}"
    rec.set("loader.batch_size", batch, why)
    return batch


def _loader(rec: Recommendation, report: HardwareReport, preset: Profile, batch: int, cuda: bool,
            measured: list[Measurement]) -> None:
    """Workers: what `bench loader` (or train's trial) measured here, through the same code as train's plan
    (tuning/advice.workers_advice); unmeasured, floor(0.75 x cores). Then the RAM and /dev/shm caps."""
    lo = preset.loader
    prefetch = lo.prefetch_factor or 2
    cores = report.cores
    rule = ar.default_workers(cores, WORKER_FRACTION)
    advice = workers_advice(measured, rule, cores)
    workers = advice.value
    why = [advice.text if advice.measured is not None else f"floor({WORKER_FRACTION} x {cores} cores) = {rule}; "
           + advice.text.split(": ", 1)[1]]
    one = ar.batch_bytes(batch, lo.image_size, overhead=lo.batch_overhead)
    budget = ar.ram_budget_bytes(math.floor(report.memory.ram_total_bytes / 2**30), preset.hardware.ram_budget_fraction)
    by_ram = ar.workers_within_budget(workers, prefetch, one, budget)
    if by_ram < workers:
        workers = by_ram
        why.append(f"capped at {by_ram} by the loader RAM budget {fmt_bytes(budget)}")
    shm = report.memory.shm_free_bytes
    if shm is not None and workers:
        raw = ar.batch_bytes(batch, lo.image_size)
        by_shm = next((w for w in range(workers, -1, -1)
                       if ar.loader_shm_bytes(w, prefetch, raw) <= shm * SHM_SHARE), 0)
        if by_shm < workers:
            wanted_gib = math.ceil(2 * ar.loader_shm_bytes(workers, prefetch, raw) / ar.GIB)
            workers = by_shm
            why.append(f"capped at {by_shm} by /dev/shm ({fmt_bytes(shm)} free)")
            rec.notes.append(f"/dev/shm is small: start the container with --shm-size={wanted_gib}g to use "
                             f"{advice.value} workers")
    if not cuda and preset.loader.decode_once:
        why.append("unused where train decodes the images once into RAM (an image folder whose pixels fit, crop and "
                   "flip augmentation; loader.decode_once)")
    rec.set("loader.num_workers", workers, "; ".join(why))
    rec.set("loader.prefetch_factor", prefetch if workers else None,
            f"the preset's {prefetch}" if workers else "no workers: nothing to prefetch")
    rec.set("loader.persistent_workers", bool(workers), "keep workers between epochs" if workers else "no workers")
    rec.set("loader.pin_memory", cuda, "page-locked buffers speed host-to-GPU copies" if cuda else "CPU: no copies")


def _speed(rec: Recommendation, report: HardwareReport, gpu: GpuInfo | None, preset: Profile) -> None:
    precision, why = _precision(gpu) if gpu is not None else _cpu_precision(report, preset)
    rec.set("speed.precision", precision, why)
    cc = float(gpu.compute_capability) if gpu and gpu.compute_capability else 0.0
    tensor_cores = gpu is not None and cc >= 7.0
    if gpu is None:
        on = preset.speed.compile and report.torch.compile_ok
        rec.set("speed.compile", on, f"CPU: the {preset.name} preset's setting" if on == preset.speed.compile
                else f"torch.compile cannot work here: {report.torch.compile_reason}")
        rec.set("speed.channels_last", preset.speed.channels_last, "CPU: the cpu preset's measured layout")
    else:
        ok = report.torch.compile_ok and tensor_cores
        rec.set("speed.compile", ok, "fuses pointwise ops, 1.1-1.3x in the A10G notes" if ok
                else f"torch.compile cannot work here: {report.torch.compile_reason or 'compute capability < 7.0'}")
        rec.set("speed.channels_last", tensor_cores, "NHWC feeds tensor cores: 1.3-1.5x for ResNet-50 AMP"
                if tensor_cores else "no tensor cores: NHWC does not help")
    rec.set("speed.tf32", gpu is not None and cc >= 8.0, "Ampere or newer: fp32 matmuls on tensor cores"
            if cc >= 8.0 else "needs compute capability 8.0")
    rec.set("speed.cudnn_benchmark", gpu is not None, "fixed input size: cuDNN picks its fastest kernels once"
            if gpu else "CPU: no cuDNN")


def _measured(rec: Recommendation, measured: list[Measurement]) -> None:
    """What trials and benchmarks measured on this machine overrides the rules of thumb (tuning/advice.py: the
    same advice train's verdict and bench give); each such setting names its measurement."""
    compile_on = advise("compile", True, measured)
    if compile_on.measured is not None:
        rec.set("speed.compile", rec.settings.get("speed.compile", False) and compile_on.suggest, compile_on.text)
    fused = advise("fused_optimizer", True, measured)
    if fused.measured is not None:
        rec.set("speed.fused_optimizer", fused.suggest, fused.text)
    newest: dict[tuple[str, str, str], Measurement] = {}
    for m in measured:  # oldest first: the newest of each setting, value and what it was measured on stays
        newest[(m.setting, str(m.value), m.on)] = m
    shown = sorted(newest.values(), key=lambda m: m.date, reverse=True)
    for m in shown[:MAX_MEASURED_NOTES]:
        rec.notes.append("measured here: " + describe(m))
    if len(shown) > MAX_MEASURED_NOTES:
        rec.notes.append(f"... and {len(shown) - MAX_MEASURED_NOTES} older measurements here (tuning.json in the "
                         "fasttrain cache)")


MAX_MEASURED_NOTES = 5  # listed newest first: past a handful they bury the recommendation (17 did, issue 25)


def recommend(report: HardwareReport, measured: list[Measurement] | None = None) -> Recommendation:
    """The best preset for this machine and the settings tuned to it (see the module docstring); `measured`:
    what was measured on this machine (tuning/store.machine_measurements), which wins over the rules."""
    name = best_preset(report)
    preset = presets.resolve_file_only(name).profile
    gpu = report.training_gpu()
    rec = Recommendation(preset=name)
    token = model_token(preset.hardware.gpu or "")
    same_chip = gpu is not None and token is not None and token in name_tokens(gpu.name)
    _hardware(rec, report, gpu, preset.hardware, same_chip)
    batch = _batch(rec, gpu, preset, _same_machine(gpu, preset.hardware))
    _loader(rec, report, preset, batch, gpu is not None, measured or [])
    _speed(rec, report, gpu, preset)
    _measured(rec, measured or [])
    same_kind = [g for g in report.gpus if gpu is not None and g.name == gpu.name]
    if len(same_kind) > 1:
        rec.notes.append(f"{len(same_kind)} x {gpu.name if gpu else ''}: train on all of them with "
                         f"`fasttrain train --nproc-per-node {len(same_kind)}` (DDP, one process per GPU; batch per "
                         "GPU, LR scales with the total)")
    if gpu is None and report.gpus:
        rec.notes.append("an NVIDIA GPU is present but torch cannot use it: fix that first (see findings), "
                         "then run doctor again")
    current = preset.model_dump()
    for key, value in rec.settings.items():
        section, field_name = key.split(".")
        if current[section][field_name] != value:
            rec.changes[key] = value
    return rec
