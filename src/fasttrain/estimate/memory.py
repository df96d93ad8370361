"""What a forecast run needs in memory: one device's training memory at a batch (weights, gradients, optimizer
state, autocast copies, the weights' moving average, activations, workspace) and the largest batch that fits, and the
host RAM the loaders,
processes and (on a CPU) the training take. Pure: from the model's counts, the plan and calibrated constants."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from fasttrain.estimate.calibration import DeviceCeilings
from fasttrain.estimate.roofline import OPTIMIZER_STATES
from fasttrain.plan import Plan
from fasttrain.profiles.schema import Profile


@dataclass
class MemoryBudget:
    weights: int
    gradients: int
    optimizer_state: int
    autocast_copies: int
    ema: int                   # the moving average of the weights (optim.ema_decay): one more copy, 0 without
    activations: int
    workspace: int
    total: int
    capacity: int | None
    fits: bool | None
    largest_batch: int | None
    activation_bytes_per_sample: float


@dataclass
class HostBudget:
    loader_buffers: int
    processes: int
    model_training: int   # CPU runs keep the whole training state in host RAM
    total: int
    capacity: int
    loader_budget: int
    fits: bool


def optimizer_state_bytes(params: int, optimizer: str, momentum: float) -> int:
    """fp32 state: SGD with momentum 1x the params, plain SGD 0x, Adam/AdamW 2x (exp_avg, exp_avg_sq)."""
    if optimizer == "sgd":
        return params * 4 if momentum > 0 else 0
    return params * 4 * OPTIMIZER_STATES[optimizer]


def memory_budget(params: int, activation_bytes_per_sample: float, batch: int, precision: str, optimizer: str,
                  momentum: float, capacity: int | None, constants: dict[str, Any], on_gpu: bool = True, *,
                  ema: bool = False) -> MemoryBudget:
    """Training memory of one device at `batch`, and the largest batch that fits `capacity` (None: unknown).
    `ema`: a moving average of the weights is kept (train/loop/ema.py): a copy of the weights in their dtype (fp32:
    mixed precision autocasts, the weights stay fp32) on the same device."""
    weights = params * 4
    gradients = params * 4
    opt = optimizer_state_bytes(params, optimizer, momentum)
    copies = params * constants["autocast_weight_copy_bytes_per_param"] if precision != "fp32" else 0
    average = weights if ema else 0
    per_sample = activation_bytes_per_sample * constants["allocator_overhead"]
    activations = int(per_sample * batch)
    fixed_state = int((weights + gradients + opt + copies + average) * constants["allocator_overhead"])
    workspace = constants["workspace_bytes"] + constants["cuda_context_bytes"] if on_gpu else 0
    total = fixed_state + activations + workspace
    fits = largest = None
    if capacity is not None:
        fits = total <= capacity
        room = capacity - fixed_state - workspace
        largest = max(0, math.floor(room / per_sample)) if per_sample > 0 else None
    return MemoryBudget(weights, gradients, opt, copies, average, activations, workspace, total, capacity, fits,
                        largest, activation_bytes_per_sample)


def host_budget(plan: Plan, profile: Profile, host_ram_bytes: int, constants: dict[str, Any],
                on_gpu: bool, model_training_bytes: int = 0) -> HostBudget:
    per_node = profile.world.gpus_per_node
    process = constants["process_overhead_bytes_gpu" if on_gpu else "process_overhead_bytes_cpu"]
    processes = per_node * (process + plan.workers * constants["worker_overhead_bytes"])
    total = plan.loader_ram_bytes + processes + model_training_bytes
    return HostBudget(plan.loader_ram_bytes, processes, model_training_bytes, total, host_ram_bytes,
                      plan.ram_budget_bytes, total <= host_ram_bytes)


def budgets(plan: Plan, profile: Profile, cost: Any, device: DeviceCeilings, host_ram_bytes: int,
             constants: dict[str, Any]) -> tuple[MemoryBudget, HostBudget]:
    """(device memory, host RAM). On the CPU the model trains in host RAM: its capacity is what the loaders
    and processes leave."""
    on_gpu = device.kind == "gpu"
    opt = profile.optim
    ema = opt.ema_decay is not None
    mem = memory_budget(cost.params, cost.activation_bytes_per_sample, plan.batch_size, plan.precision,
                        opt.optimizer, opt.momentum, device.memory_bytes if on_gpu else None, constants, on_gpu,
                        ema=ema)
    host = host_budget(plan, profile, host_ram_bytes, constants, on_gpu, 0 if on_gpu else mem.total)
    if not on_gpu:
        room = host_ram_bytes - host.loader_buffers - host.processes
        mem = memory_budget(cost.params, cost.activation_bytes_per_sample, plan.batch_size, plan.precision,
                            opt.optimizer, opt.momentum, room, constants, on_gpu=False, ema=ema)
    return mem, host
