"""`--batch-size auto`: the largest per-device batch that runs a full training step, found by trying it.

The search arithmetic (doubling, bisection, the safety margin, accumulation) is pure, in batch_math.py.
This module runs it on the device: `step_trial(...)` runs the real
training step (synthetic.run_synthetic_steps: forward, backward, optimizer step, in the plan's precision and
memory format) and reports an out-of-memory as a failed trial after freeing what the step held.
Results are cached per (model, image size, precision, memory format, optimizer, moving average of the weights on
or off, GPU, torch version) in
$FASTTRAIN_CACHE/batch_cache.json (default ~/.cache/fasttrain), so a second run starts at once.
torch is imported inside functions only: commands import this module.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.core import arithmetic as ar
from fasttrain.core.cache_dir import writable_cache_dir
from fasttrain.core.files import write_text_atomic
from fasttrain.train.loop.oom import free_device_memory, is_out_of_memory
from fasttrain.train.setup.batch_math import (
    DEFAULT_MAX_BATCH,
    SearchResult,
    Trial,
    TrialFn,
    batch_and_accumulation,
    explain,
    search_largest_batch,
)

if TYPE_CHECKING:
    from torch import nn

    from fasttrain.hardware.report import HardwareReport
    from fasttrain.plan import Plan
    from fasttrain.profiles.schema import OptimSpec, Profile

CPU_MAX_BATCH = 256
CACHE_FILE = "batch_cache.json"
CACHE_VERSION = 1


# -- cache ---------------------------------------------------------------------------------------------
def cache_path() -> Path:
    """Where search results are kept: the fasttrain cache directory (core/cache_dir.py, checked writable)."""
    return writable_cache_dir() / CACHE_FILE


def cache_key(*, model: str, image_size: int, precision: str, channels_last: bool, optimizer: str, device_name: str,
              torch_version: str, activation_checkpointing: bool = False, ema: bool = False) -> str:
    """`ema`: the trials kept a moving average of the weights (optim.ema_decay), one more copy of them on the
    device; an answer found without it does not fit with it (keys without "|ema", older ones too, mean off)."""
    fmt = "channels_last" if channels_last else "contiguous"
    ckpt = "|ckpt" if activation_checkpointing else ""
    average = "|ema" if ema else ""
    return (f"v{CACHE_VERSION}|{model}|{image_size}px|{precision}|{fmt}|{optimizer}{ckpt}{average}|{device_name}"
            f"|torch {torch_version}")


def load_cache(path: Path | None = None) -> dict[str, Any]:
    path = path or cache_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}  # absent or corrupt: a cache miss, never an error
    return data if isinstance(data, dict) else {}


def cached(key: str, path: Path | None = None) -> SearchResult | None:
    entry = load_cache(path).get(key)
    if not isinstance(entry, dict):
        return None
    try:
        result = SearchResult.from_dict(entry)
    except TypeError:
        return None
    return dataclasses.replace(result, from_cache=True, key=key)


def store(key: str, result: SearchResult, path: Path | None = None) -> None:
    """Atomic read-modify-write (temp file + rename): a killed run never leaves a half-written cache."""
    path = path or cache_path()
    writable_cache_dir(path.parent)
    data = load_cache(path)
    entry = result.to_dict()
    entry.update(from_cache=False, key=key, stored_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    data[key] = entry
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True))


# -- the torch runner ------------------------------------------------------------------------------------
def trial_plan(plan: Plan, batch: int) -> Plan:
    """The plan for one trial: this batch, every step an optimizer step, eager (compiling each size would
    cost minutes; inductor's fused kernels need no more activation memory than eager, so eager is safe)."""
    return dataclasses.replace(plan, batch_size=batch, accumulation_steps=1, compile=False,
                               effective_batch=batch * plan.world_size)


def step_trial(plan: Plan, model_factory: Callable[[], nn.Module], *, image_size: int, num_classes: int,
               optim: OptimSpec | None = None, in_chans: int = 3) -> TrialFn:
    """A `try_batch` that runs two full training steps of the real step code at batch n on a fresh model.
    Two, because the first optimizer step allocates the optimizer state: the second step's forward and
    backward run with weights, gradients, optimizer state and activations all alive, the true peak."""
    from fasttrain.train.loop.synthetic import run_synthetic_steps

    def try_batch(batch: int) -> Trial:
        started = time.perf_counter()
        reason = ""
        model: nn.Module | None = None
        try:
            model = model_factory()
            out = run_synthetic_steps(trial_plan(plan, batch), model, image_size=image_size, num_classes=num_classes,
                                      steps=1, warmup_steps=1, optim=optim, in_chans=in_chans)
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            reason = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}"
            out = None
        finally:
            model = None
        if out is None:
            free_device_memory(plan.device, reset_peak_stats=True)
            return Trial(batch, False, reason, time.perf_counter() - started)
        if plan.device == "cuda":  # a success frees its tensors by reference counting; only the allocator cache
            # needs emptying, and the peak counter restarting, so the next trial's peak is its own
            free_device_memory(plan.device, reset_peak_stats=True)
        peak = int(out["peak_memory_bytes"]) if plan.device == "cuda" else None
        return Trial(batch, True, "", time.perf_counter() - started, peak, out["images_per_s"])

    return try_batch


@dataclass
class AutoBatch:
    """What `--batch-size auto` settled on, with the search behind it and the words to show the user."""

    batch: int
    accumulation: int
    effective_batch: int
    target_effective_batch: int
    search: SearchResult
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self).items() if k != "search"}, "search": self.search.to_dict()}


def device_identity(plan: Plan) -> tuple[str, str]:
    """(device name for the cache key, torch version)."""
    import torch

    if plan.device == "cuda" and torch.cuda.is_available():
        here = torch.cuda.current_device()  # the GPU the search runs on (a worker's own, parallel/agree.py)
        name = torch.cuda.get_device_name(here)
        total = torch.cuda.get_device_properties(here).total_memory
        return f"{name} {total / ar.GIB:.0f}GiB", torch.__version__
    return "cpu", torch.__version__


def find_batch(plan: Plan, model_name: str, image_size: int, *, num_classes: int = 10, optim: OptimSpec | None = None,
               use_cache: bool = True, path: Path | None = None, max_batch: int | None = None,
               activation_checkpointing: bool = False, model_factory: Callable[[], nn.Module] | None = None
               ) -> SearchResult:
    """The search for this plan and model, from the cache when it holds the same (model, size, precision,
    format, optimizer, EMA on/off, device, torch version); otherwise run it and store it. The trials run the real
    step engine with `optim`, so an EMA run's trials hold the average's copy too."""
    from fasttrain.models.registry import create_model
    from fasttrain.profiles.schema import OptimSpec

    optim = optim or OptimSpec()
    device_name, torch_version = device_identity(plan)
    key = cache_key(model=model_name, image_size=image_size, precision=plan.precision,
                    channels_last=plan.channels_last, optimizer=optim.optimizer, device_name=device_name,
                    torch_version=torch_version, activation_checkpointing=activation_checkpointing,
                    ema=optim.ema_decay is not None)
    limit = max_batch or (DEFAULT_MAX_BATCH if plan.device == "cuda" else CPU_MAX_BATCH)
    if use_cache:
        hit = cached(key, path)
        # a result that stopped at a lower cap than this search allows says nothing about the sizes above it
        if hit is not None and not (hit.capped_by == "max_batch" and hit.largest_ok < limit):
            return hit
    if model_factory is not None:
        factory = model_factory
    elif activation_checkpointing:
        from fasttrain.models.setup import enable_activation_checkpointing

        def factory() -> nn.Module:
            model = create_model(model_name, num_classes)
            enable_activation_checkpointing(model)
            return model
    else:
        def factory() -> nn.Module:
            return create_model(model_name, num_classes)
    factory()  # a bad model name is a UserError now, not an exception inside the first trial
    result = search_largest_batch(step_trial(plan, factory, image_size=image_size, num_classes=num_classes,
                                             optim=optim), start=min(plan.batch_size, limit), max_batch=limit)
    result = dataclasses.replace(result, key=key)
    store(key, result, path)
    return result


def auto_batch(plan: Plan, model_name: str, image_size: int, *, num_classes: int = 10,
               optim: OptimSpec | None = None, use_cache: bool = True, path: Path | None = None,
               max_batch: int | None = None, activation_checkpointing: bool = False,
               model_factory: Callable[[], nn.Module] | None = None) -> AutoBatch:
    """`--batch-size auto` for train, estimate --measure and bench: the search (find_batch, cached), and the
    per-device batch and accumulation that keep the plan's samples per device per optimizer step."""
    result = find_batch(plan, model_name, image_size, num_classes=num_classes, optim=optim, use_cache=use_cache,
                        path=path, max_batch=max_batch, activation_checkpointing=activation_checkpointing,
                        model_factory=model_factory)
    target = plan.batch_size * max(1, plan.accumulation_steps)
    batch, accumulation = batch_and_accumulation(target, result.batch)
    world = max(1, plan.world_size)
    return AutoBatch(batch, accumulation, batch * accumulation * world, target * world, result,
                     explain(result, batch, accumulation, target * world, world,
                             (plan.batch_size, max(1, plan.accumulation_steps))))


def auto_batch_flags(profile: Profile, report: HardwareReport, model_name: str,
                     num_classes: int) -> tuple[dict[str, tuple[str, int]], str]:
    """`--batch-size auto` as presets.resolve flags -> (flags, the explanation for the plan). The search runs a
    plan of the profile as given on this machine: its device, precision and memory format decide what fits."""
    from fasttrain.plan import make_plan
    auto = auto_batch(make_plan(profile, report), model_name, profile.loader.image_size, num_classes=num_classes,
                      optim=profile.optim, activation_checkpointing=profile.speed.activation_checkpointing)
    return auto_flags(auto.batch, auto.accumulation), auto.message


def batch_size_flags(value: str, profile: Profile, report: HardwareReport, model_name: str,
                     num_classes: int) -> tuple[dict[str, tuple[str, int]], str | None]:
    """`--batch-size N|auto` for estimate -> (flags= for presets.resolve, a note for the plan or None).
    N sets the per-device batch; auto runs the search on this machine (cached) and keeps the profile's effective
    batch through accumulation."""
    n = check_batch_option(value)
    if n is not None:
        return {"loader.batch_size": ("--batch-size", n)}, None
    return auto_batch_flags(profile, report, model_name, num_classes)


def auto_flags(batch: int, accumulation: int) -> dict[str, tuple[str, int]]:
    """The `flags=` for presets.resolve that apply an auto batch with its provenance ("flag --batch-size auto"),
    so the profile re-validates and make_plan recomputes effective batch, scaled LR and loader RAM."""
    return {"loader.batch_size": ("--batch-size auto", batch),
            "optim.accumulation_steps": ("--batch-size auto", accumulation)}


def check_batch_option(value: str) -> int | None:
    """`--batch-size` for estimate and bench: a positive integer, or None for "auto" (train.types.parse_batch_size
    is the one parser)."""
    from fasttrain.train.types import parse_batch_size
    n = parse_batch_size(value)
    return None if n == "auto" else n
