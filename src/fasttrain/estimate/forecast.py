"""Plan + model cost + device ceilings -> Forecast. Pure: no I/O, no torch, testable on fixed inputs.

Speed: a per-op roofline (roofline.py) with calibrated efficiencies (calibration.py). Memory (memory.py): weights,
gradients, optimizer state, autocast weight copies, the weights' moving average (optim.ema_decay), activations
(saved-for-backward bytes counted on the meta device) and workspace against the device. Host RAM: loader
buffers + processes against the machine.
Units: seconds, bytes, images/s, FLOP/s, USD.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from fasttrain.core import arithmetic as ar
from fasttrain.core.format import fmt_bytes, plural
from fasttrain.estimate.calibration import DeviceCeilings
from fasttrain.estimate.cost import ModelCost
from fasttrain.estimate.memory import HostBudget, MemoryBudget, budgets
from fasttrain.estimate.roofline import OpTable, StepTime, step_time, validation_time
from fasttrain.plan import Plan
from fasttrain.profiles.schema import Profile


@dataclass(frozen=True)
class LoaderSample:
    """Decode + augment speed of ONE loader worker, measured (loader_sample.py)."""

    images_per_s_per_worker: float
    source: str   # what was measured: "--data DIR (N files)" or "estimate from this CPU ..."
    # True: generated JPEGs decoded on THIS CPU (decode_rate.py), not the user's files on the target machine.
    # An estimate decides the bottleneck but does not lower the forecast images/s (it may be another CPU).
    estimated: bool = False


@dataclass(frozen=True)
class HostWarning:
    """The plan's loader RAM over its budget (profiles/rules.py, what-if): forecast anyway, named as the bottleneck."""

    message: str
    fix: str


@dataclass
class Forecast:
    model: dict[str, Any]
    device: dict[str, Any]
    schedule: dict[str, Any]
    speed: dict[str, Any]
    time: dict[str, Any]
    memory: MemoryBudget
    host_ram: HostBudget
    loader: dict[str, Any]
    bottleneck: dict[str, str]
    cost: dict[str, Any]
    unknown: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _validation_s(plan: Plan, profile: Profile, cost: Any, device: DeviceCeilings,
                  val_size: int | None) -> float | None:
    """Seconds of each epoch's validation on one device (its share of the images under DDP), or None when the
    images or the model's forward ops are unknown."""
    if val_size is None or device.ceilings is None or getattr(cost, "forward_ops", None) is None:
        return None
    per_device = math.ceil(val_size / max(plan.world_size, 1))
    forward = cost.ops[:cost.forward_ops]
    table = OpTable.from_ops(forward)
    norms = norm_images(profile.optim.precise_bn_images, plan.batch_size,
                        any("batch_norm" in op.name for op in forward))
    return validation_time(table, per_device, plan.batch_size, device.ceilings,
                           mirrored=profile.augment.validates_mirrored, compiled=plan.compile) + \
        validation_time(table, norms, plan.batch_size, device.ceilings, compiled=plan.compile)


def norm_images(asked: int, batch: int, batch_norm: bool) -> int:
    """Images each validation first runs forward to re-estimate batch-norm statistics (train/loop/norm_stats.py:
    the fewest whole training batches holding `asked`), 0 for a model without batch norm. Pure."""
    if asked <= 0 or batch <= 0 or not batch_norm:
        return 0
    return math.ceil(asked / batch) * batch


def _money(seconds: float | None, price_per_hour: float | None, nodes: int) -> float | None:
    if seconds is None or price_per_hour is None:
        return None
    return seconds / 3600 * price_per_hour * nodes


def forecast(plan: Plan, profile: Profile, cost: ModelCost, device: DeviceCeilings, dataset_size: int, epochs: int,
             host_ram_bytes: int, constants: dict[str, Any], loader: LoaderSample | None = None,
             table: OpTable | None = None, cores: int | None = None,
             host_warning: HostWarning | None = None, val_size: int | None = None) -> Forecast:
    """Everything `estimate` prints, from fixed inputs. `cost` is a cost.ModelCost (duck-typed). `val_size`: the
    images validated after each epoch (None: unknown, so the total is the training alone)."""
    world = plan.world_size
    batch = plan.batch_size
    iterations = ar.iterations_per_epoch(dataset_size, batch, world, plan.drop_last)
    unknown = list(device.unknown)
    table = table if table is not None else OpTable.from_ops(cost.ops)

    step = None
    if device.ceilings is not None:
        step = step_time(table, batch, device.ceilings, params=cost.params, optimizer=profile.optim.optimizer,
                         momentum=profile.optim.momentum > 0, compiled=plan.compile,
                         mixed_precision=plan.precision != "fp32", fused_optimizer=plan.fused_optimizer)
    compute_rate = batch / step.seconds if step else None   # images/s of one device, data for free

    per_node = profile.world.gpus_per_node
    loader_info, loader_rate = _loader_feed(loader, plan.workers, world, compute_rate, cores, per_node)
    if loader is None:
        unknown.append("data loading speed (give --data DIR to measure it)")

    per_device = compute_rate
    # a loader rate comes with a loader sample, a compute rate with a step time: spelled out for the type checker
    if step is not None and per_device is not None and loader is not None and loader_rate is not None:
        if loader.estimated:
            bound = batch / (step.seconds + batch / loader_rate) if plan.workers == 0 else min(per_device, loader_rate)
            loader_info["input_bound_images_per_s"] = bound
            loader_info["input_bound_epoch_s"] = iterations * batch / bound if bound < per_device else None
        elif plan.workers == 0:   # the main process decodes, then computes: the two add up
            per_device = batch / (step.seconds + batch / loader_rate)
        else:
            per_device = min(per_device, loader_rate)
    scale = world * (device.multi_device_efficiency if world > 1 else 1.0)
    total_rate = per_device * scale if per_device else None
    step_s = batch / per_device if per_device else None
    epoch_s = iterations * batch * world / total_rate if total_rate else None
    val_s = _validation_s(plan, profile, cost, device, val_size) if epoch_s is not None else None
    with_val_s = epoch_s + (val_s or 0.0) if epoch_s is not None else None  # an epoch and its validation
    total_s = with_val_s * epochs if with_val_s is not None else None

    mem, host = budgets(plan, profile, cost, device, host_ram_bytes, constants)

    mfu = (cost.train_flops_per_sample * per_device / device.peak_flops) if per_device and device.peak_flops else None
    speed = {
        "step_time_s": step_s, "it_per_s": 1 / step_s if step_s else None,
        "images_per_s_per_device": per_device, "images_per_s": total_rate,
        "compute_only_images_per_s": compute_rate,
        "compute_bound_s": step.compute_bound_s if step else None,
        "memory_bound_s": step.memory_bound_s if step else None,
        "overhead_s": step.overhead_s if step else None, "optimizer_s": step.optimizer_s if step else None,
        "mfu": mfu, "multi_device_efficiency": device.multi_device_efficiency if world > 1 else 1.0,
    }
    nodes = profile.world.nodes
    return Forecast(
        model={"name": cost.model, "image_size": cost.image_size, "params": cost.params,
               "forward_flops_per_sample": cost.forward_flops_per_sample,
               "train_flops_per_sample": cost.train_flops_per_sample,
               "activation_bytes_per_sample": cost.activation_bytes_per_sample, "activation_dtype": cost.dtype},
        device={"name": device.name, "kind": device.kind, "peak_flops": device.peak_flops,
                "bandwidth_bytes_per_s": device.ceilings.bandwidth if device.ceilings else None,
                "efficiency_group": device.group, "unknown": device.unknown, "source": device.source,
                "peaks_from": device.peaks_from},
        schedule={"dataset_size": dataset_size, "epochs": epochs, "batch_size": batch, "world_size": world,
                  "nodes": nodes, "gpus_per_node": profile.world.gpus_per_node,
                  "accumulation_steps": plan.accumulation_steps, "effective_batch": plan.effective_batch,
                  "base_lr": plan.base_lr, "scaled_lr": plan.scaled_lr, "iterations_per_epoch": iterations,
                  "optimizer_steps_per_epoch": ar.optimizer_steps_per_epoch(iterations, plan.accumulation_steps),
                  "precision": plan.precision, "channels_last": plan.channels_last, "compile": plan.compile,
                  "tf32": plan.tf32, "drop_last": plan.drop_last},
        speed=speed, time={"epoch_s": epoch_s, "val_s": val_s, "val_images": val_size,
                           "val_mirrored": profile.augment.validates_mirrored, "total_s": total_s},
        memory=mem, host_ram=host, loader=loader_info,
        bottleneck=bottleneck(step, compute_rate, loader_rate, loader_info, loader, host, device, host_warning),
        cost=_prices(with_val_s, total_s, profile.hardware, nodes), unknown=unknown,
    )


def loader_feed_rate(per_worker: float, workers: int, cores: int | None, processes: int = 1) -> tuple[float, int]:
    """(images/s the loader of ONE training process delivers, processes decoding in parallel for it).
    0 workers: the main process decodes. Workers beyond the cores a process gets share them, so they add
    nothing. Pure."""
    parallel = max(workers, 1)
    if cores:
        parallel = min(parallel, max(1, cores // max(processes, 1)))
    return per_worker * parallel, parallel


def _loader_feed(loader: LoaderSample | None, workers: int, world: int, compute_rate: float | None,
                 cores: int | None = None, per_node: int = 1) -> tuple[dict[str, Any], float | None]:
    """(the forecast's loader section, images/s the loaders of one device deliver; None when not measured)."""
    info: dict[str, Any] = {"measured": loader is not None and not loader.estimated,
                            "estimated": loader is not None and loader.estimated,
                            "workers": workers, "total_workers": workers * world, "cores": cores}
    if loader is None:
        return info, None
    per_worker = loader.images_per_s_per_worker
    rate, parallel = loader_feed_rate(per_worker, workers, cores, per_node)
    info.update(source=loader.source, images_per_s_per_worker=per_worker, images_per_s=rate, decoders=parallel,
                workers_needed=math.ceil(compute_rate / per_worker) if compute_rate else None,
                keeps_up=(rate >= compute_rate) if compute_rate else None)
    return info, rate


def _prices(epoch_s: float | None, total_s: float | None, hw: Any, nodes: int) -> dict[str, Any]:
    """The forecast's cost section: hourly prices and what an epoch and the run cost at them."""
    return {
        "price_on_demand_per_hour": hw.price_on_demand_per_hour, "price_spot_per_hour": hw.price_spot_per_hour,
        "machines": nodes,
        "on_demand_per_epoch": _money(epoch_s, hw.price_on_demand_per_hour, nodes),
        "on_demand_per_run": _money(total_s, hw.price_on_demand_per_hour, nodes),
        "spot_per_epoch": _money(epoch_s, hw.price_spot_per_hour, nodes),
        "spot_per_run": _money(total_s, hw.price_spot_per_hour, nodes),
    }


def bottleneck(
    step: StepTime | None,
    compute_rate: float | None,
    loader_rate: float | None,
    loader_info: dict[str, Any],
    loader: LoaderSample | None,
    host: HostBudget,
    device: DeviceCeilings,
    host_warning: HostWarning | None = None,
) -> dict[str, str]:
    """The one thing that limits the run, the numbers that show it, and the fix where there is one."""
    if host_warning is not None:
        return {
            "name": "host RAM",
            "evidence": f"as asked, {host_warning.message} (the forecast runs the workers the plan caps to)",
            "fix": host_warning.fix,
        }
    if not host.fits:
        return {
            "name": "host RAM",
            "evidence": f"loaders and processes need {fmt_bytes(host.total)} of {fmt_bytes(host.capacity)} RAM",
            "fix": "fewer loader workers or a smaller prefetch_factor / batch",
        }
    if loader is not None and loader_rate is not None and compute_rate is not None and loader_rate < compute_rate:
        return _input_bound(compute_rate, loader_rate, loader_info, loader, device)
    if step is None:
        return {"name": "unknown", "evidence": "cannot price compute: " + "; ".join(device.unknown)}
    compute = step.compute_bound_s / step.seconds
    memory = (step.memory_bound_s + step.optimizer_s) / step.seconds
    overhead = step.overhead_s / step.seconds
    split = (
        f"step time: {compute:.0%} at the FLOP roof, {memory:.0%} at the bandwidth roof, {overhead:.0%} per-op overhead"
    )
    if step.limiter == "compute":
        return {"name": "compute", "evidence": split}
    return {"name": "memory bandwidth", "evidence": split}


def _input_bound(
    compute_rate: float, loader_rate: float, info: dict[str, Any], loader: LoaderSample, device: DeviceCeilings
) -> dict[str, str]:
    """The loader cannot feed the device: how many decode, how fast, and how many workers it would take."""
    workers, cores = info["workers"], info.get("cores")
    need = math.ceil(compute_rate / loader.images_per_s_per_worker)
    who = plural(workers, "worker") if workers else "the main process (0 workers)"
    kind = device.kind.upper()
    if loader.estimated:
        fix = f"{need} decoding cores would keep up"
        if cores is not None and need > cores:
            fix += f", more than the machine's {cores}: store the images nearer the train size or decode on the GPU"
        return {
            "name": "input pipeline (estimate)",
            "evidence": f"{who} feed about {loader_rate:,.0f} images/s ({loader.images_per_s_per_worker:,.0f} "
            f"per core, estimate from this CPU), below the {kind}'s {compute_rate:,.0f}: input-bound",
            "fix": fix,
        }
    return {
        "name": "data loading",
        "evidence": f"{who} decode {loader_rate:,.0f} images/s, "
        f"the {kind} could take {compute_rate:,.0f}: needs {plural(need, 'worker')}",
        "fix": f"loader.num_workers={need}" + (f" (the machine has {cores} cores)" if cores else ""),
    }
