"""`bench speedups`: what each speed setting buys on this machine, measured beside what the field notes guess.

From an fp32 baseline (eager, contiguous, no TF32, multi-tensor optimizer, the profile's batch) each setting
is switched on alone, then all of them together. Every configuration is a real Trainer (the same StepEngine
`train` runs) on synthetic inputs already on the device. The machine is noisy, so configurations are timed in
rounds, interleaved, in a rotating order; a setting's speed-up is the median over rounds of its images/s
divided by the baseline's images/s *in the same round*.

This module builds and times the configurations; which ones run here is bench/variants.py (the Plan's decision,
with its reason for each setting skipped), the claims bench/claims.py, and the summaries and the table
bench/speedup_summary.py, all pure and tested without timing. torch is imported inside the runner functions only.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fasttrain.bench.claims import load_claims
from fasttrain.bench.rounds import rotated
from fasttrain.bench.speedup_summary import product_of_singles, speedup_rows, summarize
from fasttrain.bench.variants import ALL, BASELINE, LABELS, Skipped, Variant, combined, plan_variants

if TYPE_CHECKING:
    import logging

    from torch import nn

    from fasttrain.hardware.report import HardwareReport
    from fasttrain.profiles.schema import OptimSpec, Profile

# torch.compile's C++ toolchain (torch.utils.cpp_extension, imported by inductor) logs "No CUDA runtime is found,
# using CUDA_HOME=..." on a machine with a CUDA toolkit but no usable GPU: noise in the bench output, which
# already says why CUDA settings are skipped.
CUDA_HOME_LOGGER = "torch.utils.cpp_extension"


def _drop_cuda_home_warning(record: logging.LogRecord) -> bool:
    return not str(getattr(record, "msg", "")).startswith("No CUDA runtime is found")


def silence_cuda_home_warning() -> None:
    """Drop that one log line (idempotent; before torch is imported, so the line is caught at its first import)."""
    import logging

    logger = logging.getLogger(CUDA_HOME_LOGGER)
    if _drop_cuda_home_warning not in logger.filters:
        logger.addFilter(_drop_cuda_home_warning)


# -- the runner (torch) -----------------------------------------------------------------------------------
@dataclass
class Candidate:
    variant: Variant
    trainer: Any
    images: Any
    targets: Any
    warnings: list[str] = field(default_factory=list)
    parking: Any = None  # bench/park.py Parking: off the GPU while the others run


def park(cand: Candidate) -> None:
    """This configuration to host memory (a no-op off CUDA), so the next one has the GPU to itself."""
    box = {"images": cand.images, "targets": cand.targets}
    cand.parking.park(cand.trainer.engine.module, cand.trainer.engine.optimizer, box)
    cand.images, cand.targets = box["images"], box["targets"]


def unpark(cand: Candidate) -> None:
    """Back on the device, with one untimed step (new addresses for the allocator and any CUDA graph)."""
    if not cand.parking.parked:
        return
    box = {"images": cand.images, "targets": cand.targets}
    cand.parking.unpark(cand.trainer.engine.module, box)
    cand.images, cand.targets = box["images"], box["targets"]
    run_steps(cand, 1)


def build_candidate(variant: Variant, model_factory: Callable[[], nn.Module], *, image_size: int, num_classes: int,
                    optim: OptimSpec, warmup_steps: int) -> Candidate | Skipped:
    """A Trainer for this configuration, warmed up (compilation, autotuning, allocator growth happen here).
    Anything that fails to run is a skipped row with the reason, never a crash of the whole bench."""
    silence_cuda_home_warning()
    from fasttrain.train.loop.oom import free_device_memory, is_out_of_memory

    plan = variant.plan
    cand: Candidate | None = None
    try:
        cand, reason = _warmed(variant, model_factory, image_size, num_classes, optim, warmup_steps)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0][:160]
        reason = "failed to run: " + (f"out of memory at batch {plan.batch_size}" if is_out_of_memory(exc)
                                      else f"{type(exc).__name__}: {first}")
    if not reason and cand is not None:
        return cand
    cand = None  # the model, optimizer and batch go with it (and with the exception, gone after its handler)
    free_device_memory(plan.device, reset_peak_stats=True)  # before the next configuration allocates its own
    return Skipped(variant.name, reason)


def _warmed(variant: Variant, model_factory: Callable[[], nn.Module], image_size: int, num_classes: int,
            optim: OptimSpec, warmup_steps: int) -> tuple[Candidate, str]:
    """(the candidate after its warm-up, why it does not count: "" when it does)."""
    import torch

    from fasttrain.bench.park import Parking
    from fasttrain.models.setup import CompileGuard
    from fasttrain.train.loop import step
    from fasttrain.train.loop import trainer as loop
    from fasttrain.train.loop.events import Collaborators

    warnings: list[str] = []
    plan = variant.plan
    # No non-finite guard: on CUDA it syncs (.item()) and passes over the gradients each step unless the
    # optimizer is fused, so the unfused baseline would carry a cost no plain loop has and every ratio lean.
    engine = step.StepEngine.build(plan, optim, model_factory(), batches_per_epoch=10**6, warn=warnings.append,
                                   nonfinite_guard=False)
    trainer = loop.Trainer(engine, collaborators=Collaborators(warn=warnings.append))
    gen = torch.Generator().manual_seed(0)
    images = torch.randn(plan.batch_size, 3, image_size, image_size, generator=gen)
    targets = torch.randint(0, num_classes, (plan.batch_size,), generator=gen)
    images, targets = trainer.engine.to_device(images, targets)
    cand = Candidate(variant, trainer, images, targets, warnings, Parking(engine.device))
    run_steps(cand, max(1, warmup_steps))
    park(cand)
    runner = trainer.engine.runner
    if isinstance(runner, CompileGuard) and not runner.active:
        return cand, f"torch.compile failed, train would run eager: {runner.fallback_reason}"
    return cand, ""


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
            unpark(cand)
            row[cand.variant.name] = run_steps(cand, steps)
            park(cand)
        results.append(row)
        if progress is not None:
            progress(f"round {r + 1}/{rounds}: " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()) + " img/s")
    return results


def bench_speedups(profile: Profile, report: HardwareReport, model_factory: Callable[[], nn.Module], *,
                   image_size: int, num_classes: int,
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
