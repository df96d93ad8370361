"""The bottleneck verdict: one plain sentence saying where the step time goes and what to change.

Pure: reads a telemetry snapshot (telemetry.Telemetry.snapshot()), the Plan and, when there is one,
the HardwareReport. The field notes' commonest story -- "GPU utilization: 0% most of the time",
a starved data loader (field note "Aggressive Training Optimizations", A10G) -- is the input-bound case; their
fix of 32 workers x prefetch 8 then ran the host out of RAM, which is why the worker advice is
always capped by the plan's RAM budget (arithmetic.workers_within_budget) and by the cores.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fasttrain.core import arithmetic as ar
from fasttrain.core.format import fmt_bytes, plural
from fasttrain.hardware.report import HardwareReport
from fasttrain.plan import Plan
from fasttrain.telemetry.contention import busy_text
from fasttrain.tuning.advice import advise
from fasttrain.tuning.store import Measurement, SettingValue

# The first steps include DataLoader worker start-up, cudnn.benchmark autotuning and torch.compile:
# judging them would call every run input- or compute-bound for the wrong reason.
WARMUP_STEPS = 20
# Fewer batches than this in the rolling window give fractions too noisy to act on.
MIN_WINDOW_STEPS = 10
# A loader that keeps up leaves the step waiting ~0% (prefetched batches are ready). Waiting 30% or
# more of each step means the input pipeline, not the model, sets the pace.
INPUT_BOUND_FRACTION = 0.30
# With the GPU mostly idle (NVML), a smaller wait is already the cause: the notes' "0% utilisation".
LOW_GPU_UTIL_PCT = 50.0
INPUT_BOUND_FRACTION_LOW_UTIL = 0.15
# Pinned, non-blocking copies overlap compute and take a few % at most; 20% means the copy is exposed.
TRANSFER_BOUND_FRACTION = 0.20
# The data-wait share is capped here before solving for workers, so a 99% wait asks for a sane number.
MAX_WAIT_FRACTION_FOR_SIZING = 0.9
# No RAM search beyond this many workers: past it, process start-up and IPC cost more than they bring.
MAX_WORKERS_CONSIDERED = 64
# Data held in memory wait only for the training process itself: in the first epoch of images decoded once into
# RAM, each image is decoded the first time a batch draws it; later epochs and runs read RAM (datasets/decoded.py).
IN_MEMORY_WAIT = ("the data are made in the training process (images decoded once into RAM are decoded the first "
                  "time a batch draws them; later epochs and runs read RAM); lighter augmentation, or "
                  "--set loader.decode_once=false to decode in loader workers instead")
# PyTorch's own default when prefetch_factor is not set.
TORCH_DEFAULT_PREFETCH = 2
# torch.compile is suggested only to a run long enough to repay it: it cost about 50 s up front for a 1.3-1.5x
# faster step on the CPU (profiles/builtin/cpu.yaml's header, benchmarks/cpu_settings.py); the same order on a GPU.
# A run shorter than COMPILE_COST_S / (1 - 1 / COMPILE_GAIN) (~3.6 min) would lose time to it.
COMPILE_COST_S = 50.0
COMPILE_GAIN = 1.3


@dataclass(frozen=True)
class Verdict:
    kind: str   # "warming-up" | "busy-machine" | "input-bound" | "transfer-bound" | "host-bound" | "compute-bound"
    text: str
    suggested_workers: int | None = None
    ram_allows_workers: int | None = None
    cores_allow_workers: int | None = None


def diagnose(snapshot: dict[str, Any], plan: Plan, report: HardwareReport | None = None,
             measured: Sequence[Measurement] = (), input_gain: str | None = None, run_s: float | None = None) -> str:
    """The verdict as one sentence, e.g. 'input-bound: 61% of each step waits for data; raise ...'."""
    return assess(snapshot, plan, report, measured, input_gain, run_s).text


def assess(snapshot: dict[str, Any], plan: Plan, report: HardwareReport | None = None,
           measured: Sequence[Measurement] = (), input_gain: str | None = None, run_s: float | None = None) -> Verdict:
    """`measured`: what was measured on this machine (tuning/store.py): a setting measured slower here is never
    suggested, and a suggestion names its measurement or says it is unmeasured (tuning/advice.py).
    input_gain: what prepared shards measured on this data (datasets/measured.gain_sentence), "" when the run
    already reads prepared shards, None when unknown. run_s: the whole run's training time (seconds) where known:
    a run too short to repay torch.compile is not told to compile."""
    seen = snapshot.get("steps_seen") or 0
    window = snapshot.get("window_steps") or 0
    wait = snapshot.get("data_wait_fraction")
    h2d = snapshot.get("h2d_fraction")
    compute = snapshot.get("compute_fraction")
    if seen < WARMUP_STEPS or window < MIN_WINDOW_STEPS or wait is None or h2d is None or compute is None:
        return Verdict("warming-up", f"warming up: {seen} of {WARMUP_STEPS} steps measured (the first steps include "
                                     "worker start-up, autotuning and compilation)")
    busy = busy_text(snapshot, report.cores if report is not None else None, planned_cores(plan, report))
    if busy is not None:  # a competitor slows every part of the step alike: the split below would not show it
        return Verdict("busy-machine", busy)
    util = snapshot.get("gpu_util_pct")
    low_util = util is not None and util < LOW_GPU_UTIL_PCT
    if wait >= INPUT_BOUND_FRACTION or (low_util and wait >= INPUT_BOUND_FRACTION_LOW_UTIL):
        return _input_bound(wait, util, plan, report, input_gain)
    if h2d >= TRANSFER_BOUND_FRACTION:
        return _transfer_bound(h2d, plan)
    if low_util:
        return Verdict("host-bound", f"host-bound: the GPU is busy only {util:.0f}% although data arrives in time; "
                                     "the Python side cannot queue work fast enough -- raise loader.batch_size or "
                                     "use speed.compile=true with compile_mode=reduce-overhead (CUDA graphs)")
    return _compute_bound(compute, plan, report, measured, run_s)


def planned_cores(plan: Plan, report: HardwareReport | None) -> float | None:
    """The cores' worth a run is planned to keep busy: on the CPU its compute threads and loader workers, on a
    GPU one core to launch work plus the workers; at most the machine's cores."""
    if report is None:
        return None
    threads = (plan.cpu_threads or max(1, report.cores - plan.workers)) if plan.device == "cpu" else 1
    return float(min(report.cores, threads + plan.workers))


def workers_needed(current_workers: int, wait_fraction: float) -> int:
    """Workers that would make data arrive as fast as compute consumes it (loading scales with workers).

    With W workers the loader delivers one batch per step time T, so each worker needs W*T per batch;
    compute alone takes (1 - f)*T, hence W / (1 - f) workers. With 0 workers the main process loads:
    load time is f*T, so f / (1 - f) workers hide it.
    """
    f = min(wait_fraction, MAX_WAIT_FRACTION_FOR_SIZING)
    if current_workers <= 0:
        return max(1, _ceil(f / (1 - f)))
    return max(current_workers + 1, _ceil(current_workers / (1 - f)))


def _ceil(x: float) -> int:
    """Ceiling that ignores float noise (0.8 / 0.2 = 4.000000000000001 needs 4 workers, not 5)."""
    return math.ceil(x - 1e-9)


def one_batch_host_bytes(plan: Plan) -> int:
    """Host bytes one prefetched batch holds on this machine (all local processes), from the plan's loader RAM."""
    if plan.workers > 0:
        return plan.loader_ram_bytes // (plan.workers * (plan.prefetch_factor or TORCH_DEFAULT_PREFETCH))
    return plan.loader_ram_bytes  # 0 workers: the main process holds one batch


def ram_allows_workers(plan: Plan) -> int:
    prefetch = plan.prefetch_factor or TORCH_DEFAULT_PREFETCH
    return ar.workers_within_budget(MAX_WORKERS_CONSIDERED, prefetch, one_batch_host_bytes(plan), plan.ram_budget_bytes)


def cores_allow_workers(report: HardwareReport | None) -> int | None:
    """Leave one core to the training process itself, which also needs the CPU to launch work."""
    return None if report is None else max(1, report.cores - 1)


def _cheaper(input_gain: str | None) -> str:
    if input_gain == "":
        return ("make each batch cheaper to load: it already reads prepared shards, so a smaller "
                "loader.image_size, lighter augmentation, more cores or decoding on the GPU")
    measured = input_gain or ("`fasttrain bench loader --data DIR` measures the factor they buy on these files")
    return ("make each batch cheaper to load: pack the image folder once into resized shards with "
            f"`fasttrain data prepare DIR --out DST` and train on --data DST ({measured}), or a smaller "
            "loader.image_size, lighter augmentation, a faster disk")


def _input_bound(wait: float, util: float | None, plan: Plan, report: HardwareReport | None,
                 input_gain: str | None = None) -> Verdict:
    head = f"input-bound: {wait:.0%} of each step waits for data"
    if util is not None:
        head += f" (GPU busy {util:.0f}%)"
    if plan.in_memory:  # no workers to add: the wait is the training process's own decoding and augmentation
        return Verdict("input-bound", f"{head}: {IN_MEMORY_WAIT}", suggested_workers=0)
    need = workers_needed(plan.workers, wait)
    ram = ram_allows_workers(plan)
    cores = cores_allow_workers(report)
    limit = min(ram, cores) if cores is not None else ram
    suggest = min(need, limit)
    kw = {"ram_allows_workers": ram, "cores_allow_workers": cores}
    ram_text = f"{ram}+" if ram >= MAX_WORKERS_CONSIDERED else str(ram)
    if suggest > plan.workers:
        text = f"{head}; raise num_workers to {suggest}"
        if suggest < need and suggest == ram:
            text += f" (RAM allows {ram}, not the {need} that would hide the wait)"
        elif suggest < need:
            text += f" (the cores allow {cores}), RAM allows {ram_text}"
        else:
            text += f", RAM allows {ram_text}"
        return Verdict("input-bound", f"{text} (--set loader.num_workers={suggest})", suggested_workers=suggest, **kw)
    cheaper = _cheaper(input_gain)
    if cores is not None and plan.workers >= cores:
        why = f"num_workers={plan.workers} already uses the {plural(report.cores, 'core') if report else '? cores'}"
    elif ram <= plan.workers:
        why = (
            f"RAM allows only {plural(ram, 'worker')} at prefetch_factor "
            f"{plan.prefetch_factor or TORCH_DEFAULT_PREFETCH} "
            f"inside the {fmt_bytes(plan.ram_budget_bytes)} budget; a smaller prefetch_factor frees room"
        )
    else:
        why = f"num_workers={plan.workers} is already at the limit"
    return Verdict("input-bound", f"{head}; {why}; {cheaper}", suggested_workers=plan.workers, **kw)


def _transfer_bound(h2d: float, plan: Plan) -> Verdict:
    if plan.device != "cuda":  # no copy to a GPU: the time is the batch's layout/dtype conversion on the host
        head = f"transfer-bound: {h2d:.0%} of each step converts batches for the model on the CPU"
        fix = (
            "try --set speed.channels_last=false (the NHWC conversion of every batch costs more than it saves)"
            if plan.channels_last
            else "have the loader hand over batches in the model's dtype and layout"
        )
        return Verdict("transfer-bound", f"{head}; {fix}")
    head = f"transfer-bound: {h2d:.0%} of each step copies batches to the device"
    if not plan.pin_memory:
        fix = "turn on loader.pin_memory so copies run with non_blocking=True and overlap compute"
    else:
        fix = "send images as uint8 and normalise on the GPU (4x fewer bytes than float32), or use a smaller image_size"
    return Verdict("transfer-bound", f"{head}; {fix}")


# --set fragment -> (tuning setting, value) in the measurement cache.
_MEASURED_AS: dict[str, tuple[str, SettingValue]] = {
    "speed.precision=bf16-mixed": ("precision", "bf16-mixed"),
    "speed.compile=true": ("compile", True),
    "speed.channels_last=true": ("channels_last", True),
    "speed.fused_optimizer=true": ("fused_optimizer", True),
    "speed.precision=fp16-mixed": ("precision", "fp16-mixed"),
}


def untapped_speedups(plan: Plan, report: HardwareReport | None, measured: Sequence[Measurement] = ()) -> list[str]:
    """Speed settings the plan has off although this device would support them, as --set fragments; those
    measured slower here are left out, one measured faster here is added (fused optimizer)."""
    out = _candidates(plan, report)
    if not plan.fused_optimizer and advise("fused_optimizer", True, list(measured)).measured is not None:
        out.append("speed.fused_optimizer=true")
    return [t for t in out if t not in _MEASURED_AS or advise(*_MEASURED_AS[t], list(measured)).suggest]


def suggestion_text(fragment: str, measured: Sequence[Measurement]) -> str:
    """`--set X (what measured it here, or unmeasured)`: every suggestion names its evidence. Pure."""
    if fragment not in _MEASURED_AS:
        return f"--set {fragment}"
    return f"--set {fragment} ({advise(*_MEASURED_AS[fragment], list(measured)).text})"


def _candidates(plan: Plan, report: HardwareReport | None) -> list[str]:
    out: list[str] = []
    gpu = report.training_gpu() if report else None
    if plan.device == "cuda":
        if plan.precision == "fp32":
            bf16 = gpu.bf16_supported if gpu is not None else None
            out.append("speed.precision=fp16-mixed" if bf16 is False else "speed.precision=bf16-mixed")
        if not plan.channels_last:  # NHWC feeds tensor cores directly for conv nets
            out.append("speed.channels_last=true")
        if plan.precision == "fp32" and not plan.tf32 and gpu is not None and gpu.tf32_supported:
            out.append("speed.tf32=true")
    elif plan.precision == "fp32" and report is not None and report.torch.cpu_bf16_fast:
        out.append("speed.precision=bf16-mixed")  # AVX512-BF16/AMX make CPU bf16 autocast pay off
    if not plan.compile and plan.compile_reason == "off in the profile" and (report is None or report.torch.compile_ok):
        out.append("speed.compile=true")
    return out


def compile_repays(run_s: float | None) -> bool:
    """Whether a run of `run_s` seconds (None: unknown) saves more than torch.compile costs up front. Pure."""
    return run_s is None or run_s * (1 - 1 / COMPILE_GAIN) > COMPILE_COST_S


def _compute_bound(
    compute: float,
    plan: Plan,
    report: HardwareReport | None,
    measured: Sequence[Measurement] = (),
    run_s: float | None = None,
) -> Verdict:
    head = f"compute-bound: {compute:.0%} of each step is compute, the input pipeline keeps up"
    todo = [t for t in untapped_speedups(plan, report, measured) if t != "speed.compile=true" or compile_repays(run_s)]
    if todo:
        return Verdict(
            "compute-bound", f"{head}; still off here: " + ", ".join(suggestion_text(t, measured) for t in todo)
        )
    return Verdict("compute-bound", f"{head}; the speed settings this device supports are on -- good")
