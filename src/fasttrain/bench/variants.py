"""Which configurations `bench speedups` times: the fp32 baseline, one variant per speed setting switched on alone,
and all of them together.

Which settings can run here is the Plan's decision (make_plan with the setting switched on): fp16 on a CPU, TF32
without an Ampere GPU, cuDNN autotuning without CUDA, compile without a compiler are skipped with the Plan's
reason. Pure: no torch, no timing.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fasttrain.hardware.report import HardwareReport
    from fasttrain.plan import Plan
    from fasttrain.profiles.schema import Profile

# The aggressive A10G note's "Larger batch (384 vs 256) 1.5x": the same factor, so the claim compares.
LARGER_BATCH_FACTOR = 1.5
BASELINE = "baseline"
ALL = "all"
# (name, label) in the order the table shows them.
SETTINGS: tuple[tuple[str, str], ...] = (
    ("fp16", "fp16 autocast + GradScaler"),
    ("bf16", "bf16 autocast"),
    ("channels_last", "channels_last"),
    ("tf32", "TF32 matmul/conv"),
    ("cudnn_benchmark", "cudnn.benchmark"),
    ("compile", "torch.compile"),
    ("fused_optimizer", "fused optimizer"),
    ("larger_batch", f"batch x{LARGER_BATCH_FACTOR:g}"),
)
LABELS = {BASELINE: "fp32 baseline", ALL: "all together", **dict(SETTINGS)}


@dataclass
class Variant:
    name: str
    plan: Plan
    note: str = ""


@dataclass
class Skipped:
    name: str
    reason: str


def baseline_plan(plan: Plan, batch: int | None = None) -> Plan:
    """fp32, eager, contiguous, no TF32/autotuning, foreach optimizer, every step an optimizer step."""
    b = batch or plan.batch_size
    return dataclasses.replace(
        plan, precision="fp32", precision_reason="baseline", channels_last=False, compile=False,
        compile_reason="baseline", tf32=False, cudnn_benchmark=False, fused_optimizer=False, batch_size=b,
        accumulation_steps=1, effective_batch=b * plan.world_size)


def _asked(profile: Profile, report: HardwareReport, **speed: Any) -> Plan:
    """The Plan for `profile` with these speed keys switched on: it says what really runs here and why not."""
    from fasttrain.plan import make_plan
    from fasttrain.profiles.schema import Profile

    data = profile.model_dump()
    data["speed"] = {**data["speed"], **speed}
    return make_plan(Profile.model_validate(data), report)


def plan_variants(profile: Profile, report: HardwareReport, *, batch: int | None = None,
                  only: list[str] | None = None) -> tuple[Variant, list[Variant], list[Skipped]]:
    """-> (baseline, one variant per setting that can run here, skipped settings with the reason)."""
    base = baseline_plan(_asked(profile, report), batch)
    variants: list[Variant] = []
    skipped: list[Skipped] = []

    def one(name: str, ok: bool, reason: str, note: str = "", **changes: Any) -> None:
        if only is not None and name not in only:
            return
        if ok:
            variants.append(Variant(name, dataclasses.replace(base, **changes), note))
        else:
            skipped.append(Skipped(name, reason))

    for name, precision in (("fp16", "fp16-mixed"), ("bf16", "bf16-mixed")):
        p = _asked(profile, report, precision=precision)
        one(name, p.precision == precision, p.precision_reason, precision=precision, precision_reason="bench")
    p = _asked(profile, report, channels_last=True)
    one("channels_last", True, "", channels_last=True)
    p = _asked(profile, report, tf32=True)
    one("tf32", p.tf32, "; ".join(p.notes[:1]) or "TF32 needs an Ampere or newer NVIDIA GPU", tf32=True)
    p = _asked(profile, report, cudnn_benchmark=True)
    one("cudnn_benchmark", p.cudnn_benchmark, "cuDNN autotuning needs a CUDA GPU", cudnn_benchmark=True)
    p = _asked(profile, report, compile=True)
    one("compile", p.compile, p.compile_reason, compile=True, compile_reason="bench",
        compile_mode=profile.speed.compile_mode)
    # Fused optimizer kernels exist for the CPU too, and `train` uses them there (tuned by its trial).
    one("fused_optimizer", True, "", "", fused_optimizer=True)
    bigger = max(base.batch_size + 1, round(base.batch_size * LARGER_BATCH_FACTOR))
    one("larger_batch", True, "", f"batch {base.batch_size} -> {bigger}", batch_size=bigger,
        effective_batch=bigger * base.world_size)
    return Variant(BASELINE, base), variants, skipped


def combined(base: Variant, ran: list[Variant]) -> Variant | None:
    """Every setting that ran, at once. Precision: fp16 when it ran (the notes' 2.0x is fp16), else bf16."""
    if not ran:
        return None
    changes: dict[str, Any] = {}
    names = {v.name for v in ran}
    for v in ran:
        if v.name in ("fp16", "bf16"):
            continue
        for f in ("channels_last", "tf32", "cudnn_benchmark", "compile", "compile_mode", "fused_optimizer",
                  "batch_size", "effective_batch"):
            value = getattr(v.plan, f)
            if value != getattr(base.plan, f):
                changes[f] = value
    precision = "fp16" if "fp16" in names else "bf16" if "bf16" in names else None
    if precision:
        changes["precision"] = next(v.plan.precision for v in ran if v.name == precision)
    parts = [n for n in (precision,) if n] + sorted(n for n in names if n not in ("fp16", "bf16"))
    return Variant(ALL, dataclasses.replace(base.plan, **changes), " + ".join(parts))
