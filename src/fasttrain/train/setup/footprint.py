"""The whole training footprint against the machine the run uses, before any work (setup/prepare.py).

Weights, gradients, optimizer state, the weights' moving average (optim.ema_decay) and the batch's activations
(counted on the meta device by estimate/cost.py, priced by estimate/memory.py's memory_budget) live in GPU memory
on a GPU and in host RAM on a CPU; the loaders and processes always live in host RAM. A batch that does not fit
is split into micro-batches with gradient accumulation (same effective batch, same LR); one that cannot is refused.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fasttrain.core import arithmetic as ar
from fasttrain.core.errors import Problem, UserError
from fasttrain.core.format import fmt_bytes
from fasttrain.hardware.report import HardwareReport
from fasttrain.plan import Plan, fit_micro_batch
from fasttrain.profiles.schema import Profile

# The launching process hands its fitted "micro,accumulation" to its torchrun workers, so every rank agrees.
HANDOFF_ENV = "FASTTRAIN_MICRO_BATCH"

_COUNTS: dict[tuple[str, int, int, str], tuple[int, float] | None] = {}


@dataclass(frozen=True)
class Limit:
    what: str                      # "RAM" or "GPU memory"
    capacity: int                  # bytes
    need: Callable[[int], int]     # bytes at a micro-batch


def model_counts(model: str, image_size: int, num_classes: int, precision: str) -> tuple[int, float] | None:
    """(parameters, activation bytes per sample) on the meta device, once per process; None when the meta
    device cannot run the model (a custom model with data-dependent code): then nothing is checked."""
    key = (model, image_size, num_classes, precision)
    if key not in _COUNTS:
        from fasttrain.estimate.gather import model_cost  # remembered per process: the run's forecast prices it too
        try:
            c = model_cost(model, image_size, num_classes, precision)
            _COUNTS[key] = (c.params, c.activation_bytes_per_sample)
        except (UserError, RuntimeError, NotImplementedError, TypeError, ValueError, AssertionError, IndexError):
            _COUNTS[key] = None
    return _COUNTS[key]


def limits(plan: Plan, profile: Profile, report: HardwareReport, params: int, per_sample: float,
           constants: dict[str, Any], *, worker: bool = False) -> list[Limit]:
    """What a micro-batch must fit on this machine: the GPU's memory (on a GPU), and the host RAM available
    (total RAM in a torchrun worker, the same on every rank) to loaders, processes and, on a CPU, training."""
    from fasttrain.estimate.memory import memory_budget
    on_gpu = plan.device == "cuda"
    per_node = profile.world.gpus_per_node
    opt = profile.optim

    def training(batch: int) -> int:
        return memory_budget(params, per_sample, batch, plan.precision, opt.optimizer, opt.momentum, None,
                             constants, on_gpu, ema=opt.ema_decay is not None).total

    process = constants["process_overhead_bytes_gpu" if on_gpu else "process_overhead_bytes_cpu"]
    processes = per_node * (process + plan.workers * constants["worker_overhead_bytes"])

    def host(batch: int) -> int:
        one = ar.batch_bytes(batch, plan.image_size, overhead=profile.loader.batch_overhead)
        loaders = ar.loader_ram_bytes(plan.workers, plan.prefetch_factor, one, per_node)
        return loaders + processes + (0 if on_gpu else per_node * training(batch))

    ram = report.memory.ram_total_bytes if worker else report.memory.ram_available_bytes
    out = [Limit("RAM", ram, host)]
    memory = report.training_memory()
    if on_gpu and memory is not None:  # what the device reports free (the back-off is off under DDP: plan it)
        free, source = memory
        # torch's reading was taken with a CUDA context held, and training() counts one: count it once
        out.insert(0, Limit("GPU memory", free + (constants["cuda_context_bytes"] if source == "torch" else 0),
                            training))
    return out


def fit(plan: Plan, found: list[Limit], prefer: tuple[int, int] | None = None) -> tuple[int, int, str | None]:
    """-> (micro-batch, accumulation steps, the plan note when the batch was split). Pure. UserError with the
    numbers when not even batch 1 fits. `prefer`: a resumed checkpoint's split, kept when it is the same
    effective batch and fits (a resume must not change the micro-batch)."""
    batch = plan.batch_size
    if prefer is not None and prefer[0] * prefer[1] == batch * plan.accumulation_steps \
            and all(lim.need(prefer[0]) <= lim.capacity for lim in found):
        return prefer[0], prefer[1], None
    fitted = fit_micro_batch(
        batch, plan.accumulation_steps, lambda b: all(lim.need(b) <= lim.capacity for lim in found)
    )
    first = next((lim for lim in found if lim.need(batch) > lim.capacity), None)
    if fitted is None:
        worst = next(lim for lim in found if lim.need(1) > lim.capacity)
        raise UserError(
            [
                Problem(
                    "loader.batch_size",
                    f"not even batch 1 fits in {fmt_bytes(worst.capacity)} of "
                    f"{worst.what} (needs ~{fmt_bytes(worst.need(1))}; batch {batch} ~"
                    f"{fmt_bytes(worst.need(batch))})",
                    "a smaller model or --image-size, fewer loader workers, or a machine with more memory",
                    batch,
                )
            ]
        )
    micro, accumulation = fitted
    if first is None:
        return micro, accumulation, None
    return (
        micro,
        accumulation,
        (
            f"batch {batch} does not fit in {fmt_bytes(first.capacity)} of {first.what} (needs ~"
            f"{fmt_bytes(first.need(batch))}): micro-batch {micro} x {accumulation} accumulation steps, "
            f"effective batch {plan.effective_batch} and LR unchanged"
        ),
    )


def handed_split() -> tuple[int, int] | None:
    """The (micro-batch, accumulation) the launcher handed this worker in HANDOFF_ENV, or None."""
    handed = os.environ.get(HANDOFF_ENV, "")
    if handed.count(",") == 1 and all(part.isdigit() and int(part) > 0 for part in handed.split(",")):
        micro, accumulation = (int(part) for part in handed.split(","))
        return micro, accumulation
    return None


def check(
    plan: Plan,
    profile: Profile,
    report: HardwareReport,
    model: str,
    num_classes: int,
    *,
    worker: bool = False,
    prefer: tuple[int, int] | None = None,
) -> tuple[int, int, str | None]:
    """The run's micro-batch on this machine -> (micro-batch, accumulation, note or None)."""
    handed = handed_split() if worker else None
    if handed is not None:
        return handed[0], handed[1], None
    counts = model_counts(model, plan.image_size, num_classes, plan.precision)
    if counts is None:
        return plan.batch_size, plan.accumulation_steps, None
    from fasttrain.estimate import calibration

    found = limits(plan, profile, report, counts[0], counts[1], calibration.load()["memory"], worker=worker)
    return fit(plan, found, prefer)
