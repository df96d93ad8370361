"""`bench speedups`: what each speed setting buys on this machine, measured beside what the field notes guess.

From an fp32 baseline (eager, contiguous, no TF32, multi-tensor optimizer, the profile's batch) each setting
is switched on alone, then all of them together. Every configuration is a real Trainer (the same StepEngine
`train` runs) on synthetic inputs already on the device. The machine is noisy, so configurations are timed in
rounds, interleaved, in a rotating order; a setting's speed-up is the median over rounds of its images/s
divided by the baseline's images/s *in the same round*.

Which settings can run here is the Plan's decision (make_plan with the setting switched on): fp16 on a CPU,
TF32 without an Ampere GPU, cuDNN autotuning without CUDA, compile without a compiler are skipped with the
Plan's reason. Pure parts (variants, summaries, the table) are tested without timing; torch is imported
inside the runner functions only.
"""
from __future__ import annotations

import csv
import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from fasttrain.bench.rounds import rotated

# torch.compile's C++ toolchain (torch.utils.cpp_extension, imported by inductor) logs "No CUDA runtime is found,
# using CUDA_HOME=..." on a machine with a CUDA toolkit but no usable GPU: noise in the bench output, which
# already says why CUDA settings are skipped.
CUDA_HOME_LOGGER = "torch.utils.cpp_extension"


def _drop_cuda_home_warning(record: Any) -> bool:
    return not str(getattr(record, "msg", "")).startswith("No CUDA runtime is found")


def silence_cuda_home_warning() -> None:
    """Drop that one log line (idempotent; before torch is imported, so the line is caught at its first import)."""
    import logging

    logger = logging.getLogger(CUDA_HOME_LOGGER)
    if _drop_cuda_home_warning not in logger.filters:
        logger.addFilter(_drop_cuda_home_warning)


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
# A measured speed-up within this of 1.0 is "no change" in the verdict column: round-to-round noise here.
NOISE_BAND = 0.03


@dataclass
class Variant:
    name: str
    plan: Any                   # fasttrain.plan.Plan
    note: str = ""


@dataclass
class Skipped:
    name: str
    reason: str


# -- which configurations (pure) ------------------------------------------------------------------------
def baseline_plan(plan: Any, batch: int | None = None) -> Any:
    """fp32, eager, contiguous, no TF32/autotuning, foreach optimizer, every step an optimizer step."""
    b = batch or plan.batch_size
    return dataclasses.replace(
        plan, precision="fp32", precision_reason="baseline", channels_last=False, compile=False,
        compile_reason="baseline", tf32=False, cudnn_benchmark=False, fused_optimizer=False, batch_size=b,
        accumulation_steps=1, effective_batch=b * plan.world_size)


def _asked(profile: Any, report: Any, **speed: Any) -> Any:
    """The Plan for `profile` with these speed keys switched on: it says what really runs here and why not."""
    from fasttrain.plan import make_plan
    from fasttrain.profiles.schema import Profile

    data = profile.model_dump()
    data["speed"] = {**data["speed"], **speed}
    return make_plan(Profile.model_validate(data), report)


def plan_variants(profile: Any, report: Any, *, batch: int | None = None,
                  only: list[str] | None = None) -> tuple[Variant, list[Variant], list[Skipped]]:
    """-> (baseline, one variant per setting that can run here, skipped settings with the reason)."""
    base = baseline_plan(_asked(profile, report), batch)
    cuda = base.device == "cuda"
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


# -- the claims (data file) -----------------------------------------------------------------------------
def load_claims(path: Path | None = None) -> list[dict[str, str]]:
    """Rows of data/speedup_claims.csv: setting, claimed_speedup, low, high, source, quote."""
    if path is None:
        path = Path(str(resources.files("fasttrain") / "data" / "speedup_claims.csv"))
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def claims_text(setting: str, claims: list[dict[str, str]]) -> tuple[float | None, str]:
    """(the first note's figure, "1.2x optimal-single-gpu-a10g.md; 1.1-1.3x aggressive-...") for a setting."""
    rows = [r for r in claims if r["setting"] == setting and r["claimed_speedup"]]
    if not rows:
        return None, "no figure in the notes"
    parts = []
    for r in rows:
        low, high = float(r["low"]), float(r["high"])
        figure = f"{low:g}x" if low == high else f"{low:g}-{high:g}x"
        parts.append(f"{figure} {r['source'].removesuffix('.md')}")
    return float(rows[0]["claimed_speedup"]), "; ".join(parts)


def claims_short(setting: str, claims: list[dict[str, str]]) -> str:
    """"2-3x (4 notes)" or "1.5x (aggressive-a10g-imagenet)": the range over every note, for narrow tables."""
    rows = [r for r in claims if r["setting"] == setting and r["claimed_speedup"]]
    if not rows:
        return "none"
    low, high = min(float(r["low"]) for r in rows), max(float(r["high"]) for r in rows)
    figure = f"{low:g}x" if low == high else f"{low:g}-{high:g}x"
    return f"{figure} ({rows[0]['source'].removesuffix('.md')})" if len(rows) == 1 else f"{figure} ({len(rows)} notes)"


# -- summaries (pure) ----------------------------------------------------------------------------------
def summarize(rounds: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """rounds: [{config: images/s}] -> per config: median images/s, speed-up (median over rounds of the ratio
    to the same round's baseline) and the lowest and highest of those ratios."""
    out: dict[str, dict[str, float]] = {}
    names = {n for r in rounds for n in r}
    for name in names:
        values = [r[name] for r in rounds if name in r]
        ratios = [r[name] / r[BASELINE] for r in rounds if name in r and r.get(BASELINE)]
        out[name] = {"images_per_s": statistics.median(values),
                     "speedup": statistics.median(ratios) if ratios else float("nan"),
                     "speedup_low": min(ratios) if ratios else float("nan"),
                     "speedup_high": max(ratios) if ratios else float("nan"), "rounds": len(values)}
    return out


def verdict(measured: float, claimed: float | None, low: float | None = None, high: float | None = None) -> str:
    """Words for the verdict column. When some rounds were faster and some slower than the baseline the median
    alone would overstate what is known, so the row says the rounds disagree."""
    if measured < 1 - NOISE_BAND or measured > 1 + NOISE_BAND:
        if low is not None and high is not None and low < 1.0 < high:
            return f"unclear: rounds disagree ({low:.2f}-{high:.2f}x)"
    if measured < 1 - NOISE_BAND:
        return "slower here"
    if measured <= 1 + NOISE_BAND:
        return "no gain here"
    if claimed is None:
        return "faster"
    return "as claimed or better" if measured >= claimed - NOISE_BAND else f"{measured / claimed:.0%} of the claim"


def speedup_rows(summary: dict[str, dict[str, float]], variants: list[Variant], skipped: list[Skipped],
                 claims: list[dict[str, str]], all_variant: Variant | None = None) -> list[dict[str, Any]]:
    """The table: baseline, each setting (measured or skipped, with its reason), all together."""
    rows: list[dict[str, Any]] = []
    notes = {v.name: v.note for v in variants}
    if all_variant is not None:
        notes[ALL] = all_variant.note
    skip = {s.name: s.reason for s in skipped}
    order = [BASELINE] + [n for n, _ in SETTINGS] + [ALL]
    for name in order:
        claimed, claim_text = claims_text(name, claims) if name != BASELINE else (None, "")
        row: dict[str, Any] = {"setting": name, "label": LABELS[name], "claimed_speedup": claimed,
                               "claimed": claim_text, "claimed_short": claims_short(name, claims) if claim_text else "",
                               "note": notes.get(name, "")}
        if name in summary:
            s = summary[name]
            row.update(status="measured", images_per_s=s["images_per_s"], speedup=s["speedup"],
                       speedup_low=s["speedup_low"], speedup_high=s["speedup_high"],
                       verdict="reference" if name == BASELINE else verdict(s["speedup"], claimed,
                                                                            s["speedup_low"], s["speedup_high"]))
        elif name in skip:
            row.update(status="skipped", reason=skip[name])
        else:
            continue  # not asked for (--only)
        rows.append(row)
    return rows


# bench setting -> (tuning setting, value) in the measurement cache (tuning/store.py).
MEASURED_AS = {"bf16": ("precision", "bf16-mixed"), "fp16": ("precision", "fp16-mixed"),
               "channels_last": ("channels_last", True), "tf32": ("tf32", True),
               "cudnn_benchmark": ("cudnn_benchmark", True), "compile": ("compile", True),
               "fused_optimizer": ("fused_optimizer", True)}


def measurements_from_rows(rows: list[dict[str, Any]], today: str) -> list[Any]:
    """The measured rows as tuning Measurements ("compile: 0.93x here (bench speedups, DATE)"). Pure."""
    from fasttrain.tuning.store import Measurement

    return [Measurement(*MEASURED_AS[r["setting"]], round(float(r["speedup"]), 3), "bench speedups", today)
            for r in rows if r.get("status") == "measured" and r["setting"] in MEASURED_AS]


def product_of_singles(rows: list[dict[str, Any]]) -> float | None:
    """What multiplying the single speed-ups predicts for all together (the notes' arithmetic). Only one
    precision counts, the one `all` uses: fp16 when it was measured, else bf16."""
    measured = {r["setting"]: r["speedup"] for r in rows if r.get("status") == "measured"}
    singles = [v for k, v in measured.items() if k not in (BASELINE, ALL) and not (k == "bf16" and "fp16" in measured)]
    if not singles:
        return None
    total = 1.0
    for s in singles:
        total *= s
    return total


# -- the runner (torch) -----------------------------------------------------------------------------------
@dataclass
class Candidate:
    variant: Variant
    trainer: Any
    images: Any
    targets: Any
    warnings: list[str] = field(default_factory=list)


def build_candidate(variant: Variant, model_factory: Callable[[], Any], *, image_size: int, num_classes: int,
                    optim: Any, warmup_steps: int) -> Candidate | Skipped:
    """A Trainer for this configuration, warmed up (compilation, autotuning, allocator growth happen here).
    Anything that fails to run is a skipped row with the reason, never a crash of the whole bench."""
    silence_cuda_home_warning()
    import torch

    from fasttrain.train.loop.oom import free_device_memory, is_out_of_memory
    from fasttrain.models.setup import CompileGuard
    from fasttrain.train.events import Collaborators
    from fasttrain.train.loop import step, trainer as loop

    warnings: list[str] = []
    plan = variant.plan
    cand: Candidate | None = None
    reason = ""
    try:
        engine = step.StepEngine.build(plan, optim, model_factory(), batches_per_epoch=10**6, warn=warnings.append)
        trainer = loop.Trainer(engine, io=Collaborators(warn=warnings.append))
        gen = torch.Generator().manual_seed(0)
        images = torch.randn(plan.batch_size, 3, image_size, image_size, generator=gen)
        targets = torch.randint(0, num_classes, (plan.batch_size,), generator=gen)
        images, targets = trainer.engine.to_device(images, targets)
        cand = Candidate(variant, trainer, images, targets, warnings)
        run_steps(cand, max(1, warmup_steps))
        runner = trainer.engine.runner
        if isinstance(runner, CompileGuard) and not runner.active:
            reason = f"torch.compile failed, train would run eager: {runner.fallback_reason}"
    except Exception as exc:  # noqa: BLE001 - a configuration that cannot run is reported, not fatal
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        reason = "failed to run: " + (f"out of memory at batch {plan.batch_size}" if is_out_of_memory(exc)
                                      else f"{type(exc).__name__}: {first}")
    if not reason and cand is not None:
        return cand
    cand = trainer = engine = images = targets = runner = None  # noqa: F841 - drop the model and optimizer state
    free_device_memory(plan.device, reset_peak_stats=True)  # before the next configuration allocates its own
    return Skipped(variant.name, reason)


def run_steps(cand: Candidate, steps: int) -> float:
    """Time `steps` full training steps (forward, backward, optimizer step) -> images/s. The backend flags
    are global, so this candidate's TF32/cudnn settings are applied before its own timing."""
    import time

    import torch

    from fasttrain.models.setup import configure_backends

    trainer = cand.trainer
    engine = trainer.engine
    configure_backends(cand.variant.plan)
    cuda = engine.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(engine.device)
    started = time.perf_counter()
    for _ in range(steps):
        engine.forward_backward(cand.images, cand.targets, 1)
        engine.optimizer_step()
    if cuda:
        torch.cuda.synchronize(engine.device)
    return steps * cand.variant.plan.batch_size / max(time.perf_counter() - started, 1e-9)


def measure(candidates: list[Candidate], *, steps: int, rounds: int,
            progress: Callable[[str], None] | None = None) -> list[dict[str, float]]:
    """Interleaved rounds; the order rotates each round so no configuration always runs first or last."""
    results: list[dict[str, float]] = []
    for r in range(rounds):
        row: dict[str, float] = {}
        for cand in rotated(candidates, r):
            row[cand.variant.name] = run_steps(cand, steps)
        results.append(row)
        if progress is not None:
            progress(f"round {r + 1}/{rounds}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()) + " img/s")
    return results


def bench_speedups(profile: Any, report: Any, model_factory: Callable[[], Any], *, image_size: int, num_classes: int,
                   batch: int | None = None, steps: int = 3, rounds: int = 3, warmup_steps: int = 2,
                   only: list[str] | None = None, with_all: bool = True,
                   progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Build every configuration, time them in interleaved rounds, and assemble the table. -> result dict."""
    silence_cuda_home_warning()
    say = progress or (lambda text: None)
    base, variants, skipped = plan_variants(profile, report, batch=batch, only=only)
    optim = profile.optim.model_copy(update={"accumulation_steps": 1})
    built: list[Candidate] = []
    for v in [base, *variants]:
        say(f"warming up {LABELS[v.name]}")
        c = build_candidate(v, model_factory, image_size=image_size, num_classes=num_classes, optim=optim,
                            warmup_steps=warmup_steps)
        if isinstance(c, Skipped):
            if v.name == BASELINE:
                from fasttrain.core.errors import JobFailed

                raise JobFailed(f"the fp32 baseline does not run: {c.reason}")
            skipped.append(c)
        else:
            built.append(c)
    ran = [c.variant for c in built if c.variant.name != BASELINE]
    all_variant = combined(base, ran) if with_all and len(ran) > 1 else None
    if all_variant is not None:
        say(f"warming up {LABELS[ALL]} ({all_variant.note})")
        c = build_candidate(all_variant, model_factory, image_size=image_size, num_classes=num_classes,
                            optim=optim, warmup_steps=warmup_steps)
        if isinstance(c, Skipped):
            skipped.append(c)
        else:
            built.append(c)
    samples = measure(built, steps=steps, rounds=rounds, progress=say)
    summary = summarize(samples)
    rows = speedup_rows(summary, variants, skipped, load_claims(), all_variant)
    return {"device": base.plan.device, "batch_size": base.plan.batch_size, "image_size": image_size,
            "steps": steps, "rounds": rounds, "warmup_steps": warmup_steps, "rows": rows,
            "product_of_singles": product_of_singles(rows), "samples": samples,
            "warnings": sorted({w for c in built for w in c.warnings})}
