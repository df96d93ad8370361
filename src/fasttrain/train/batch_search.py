"""`--batch-size auto`: the largest per-device batch that runs a full training step, found by trying it.

Pure core: `search_largest_batch(try_batch, ...)` grows the batch by doubling from a start until a size fails,
bisects between the largest success and the smallest failure, then takes a safety margin off and *runs that
size too*, so the answer is always a size that was seen to work. `batch_and_accumulation` keeps the
profile's effective batch with gradient accumulation. Thin torch runner: `step_trial(...)` runs the real
training step (synthetic.run_synthetic_steps: forward, backward, optimizer step, in the plan's precision and
memory format) and reports an out-of-memory as a failed trial after freeing what the step held.
Results are cached per (model, image size, precision, memory format, optimizer, GPU, torch version) in
$FASTTRAIN_CACHE/batch_cache.json (default ~/.cache/fasttrain), so a second run starts at once.
torch is imported inside functions only: commands import this module.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fasttrain.core import arithmetic as ar
from fasttrain.core.errors import JobFailed, Problem, UserError
from fasttrain.train.oom import free_device_memory, is_out_of_memory

# Fraction taken off the largest size that ran. The search runs on random tensors for two steps; a real run
# also meets allocator fragmentation after hours, cuDNN workspaces that vary with the algorithm picked,
# variable-size last batches, a validation pass and other processes on the GPU. 10% is the usual headroom.
SAFETY_MARGIN = 0.10
# Bisection stops when the gap between the largest success and the smallest failure is within this fraction
# of the success (or 1): finer steps cost a trial each and the margin removes more than this anyway.
BISECT_TOLERANCE = 0.02
# Hard cap on trials: doubling from 1 to 65,536 is 17, bisecting to 2% ~6, the margin check 1.
MAX_TRIALS = 32
# Without a device memory limit (CPU) the search stops here: larger batches only use more host RAM.
DEFAULT_MAX_BATCH = 4096
CPU_MAX_BATCH = 256
CACHE_FILE = "batch_cache.json"
CACHE_VERSION = 1

TrialFn = Callable[[int], "Trial"]


@dataclass
class Trial:
    """One attempt at a batch size: ran (ok) or ran out of memory (ok=False, reason)."""

    batch: int
    ok: bool
    reason: str = ""
    seconds: float = 0.0
    peak_memory_bytes: int | None = None
    images_per_s: float | None = None


@dataclass
class SearchResult:
    batch: int                      # the answer: largest_ok minus the margin, and itself a successful trial
    largest_ok: int                 # largest size that ran
    smallest_failed: int | None     # smallest size that ran out of memory (None: never failed, capped)
    margin: float
    trials: list[Trial] = field(default_factory=list)
    capped_by: str | None = None    # "max_batch" | "max_trials" when the search stopped before an OOM
    from_cache: bool = False
    key: str = ""

    @property
    def tried(self) -> list[int]:
        return [t.batch for t in self.trials]

    @property
    def succeeded(self) -> list[int]:
        return [t.batch for t in self.trials if t.ok]

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tried": self.tried, "succeeded": self.succeeded}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearchResult:
        trials = [Trial(**t) for t in data.get("trials", [])]
        keep = {f.name for f in dataclasses.fields(cls)} - {"trials"}
        return cls(**{k: v for k, v in data.items() if k in keep}, trials=trials)


class _Runner:
    """Memoised trials: a size is never run twice, and every run is recorded in order."""

    def __init__(self, try_batch: TrialFn, max_trials: int):
        self.try_batch = try_batch
        self.max_trials = max_trials
        self.trials: list[Trial] = []
        self.seen: dict[int, Trial] = {}

    @property
    def exhausted(self) -> bool:
        return len(self.trials) >= self.max_trials

    def ok(self, batch: int) -> bool:
        if batch not in self.seen:
            trial = self.try_batch(batch)
            self.trials.append(trial)
            self.seen[batch] = trial
        return self.seen[batch].ok


def search_largest_batch(try_batch: TrialFn, *, start: int = 1, max_batch: int = DEFAULT_MAX_BATCH,
                         margin: float = SAFETY_MARGIN, max_trials: int = MAX_TRIALS,
                         tolerance: float = BISECT_TOLERANCE) -> SearchResult:
    """Grow by doubling from `start` (or halve while it fails), bisect, take `margin` off and confirm it runs.

    `try_batch(n)` runs one full training step at batch n and returns a Trial. The returned `batch` is always
    one of the sizes that ran successfully; no size is tried twice; at most `max_trials` trials run.
    Raises JobFailed when even batch 1 does not fit.
    """
    if not 0 <= margin < 1:
        raise ValueError("margin must be in [0, 1)")
    run = _Runner(try_batch, max_trials)
    size = max(1, min(start, max_batch))
    lo, hi, capped = 0, None, None          # lo: largest success, hi: smallest failure
    if run.ok(size):
        lo = size
        while hi is None:
            if lo >= max_batch:
                capped = "max_batch"
                break
            if run.exhausted:
                capped = "max_trials"
                break
            nxt = min(lo * 2, max_batch)
            if run.ok(nxt):
                lo = nxt
            else:
                hi = nxt
    else:
        hi = size
        while lo == 0:
            if hi == 1:
                raise JobFailed("even a batch of 1 runs out of memory: " + run.seen[1].reason +
                                "; use a smaller model or image size, bf16/fp16 precision or activation checkpointing")
            if run.exhausted:
                raise JobFailed(f"no batch size fitted in {max_trials} trials (tried {sorted(run.seen)})")
            nxt = max(1, hi // 2)
            if run.ok(nxt):
                lo = nxt
            else:
                hi = nxt
    while hi is not None and hi - lo > max(1, math.floor(lo * tolerance)) and not run.exhausted:
        mid = (lo + hi) // 2
        if run.ok(mid):
            lo = mid
        else:
            hi = mid
    if hi is not None and hi - lo > max(1, math.floor(lo * tolerance)):
        capped = "max_trials"
    # No size failed below the cap: there is no limit to keep a margin from, the cap itself ran.
    answer = lo if capped == "max_batch" else _confirmed_margin(run, lo, margin)
    return SearchResult(batch=answer, largest_ok=lo, smallest_failed=hi, margin=margin, trials=run.trials,
                        capped_by=capped)


def _confirmed_margin(run: _Runner, largest_ok: int, margin: float) -> int:
    """The margin target, run once to be sure; if it fails (memory is not monotone in the batch, e.g. a
    different conv algorithm), step down by the margin again; past the trial cap, the largest success below."""
    target = max(1, math.floor(largest_ok * (1 - margin)))
    while True:
        if target in run.seen and run.seen[target].ok:
            return target
        if target not in run.seen and not run.exhausted and run.ok(target):
            return target
        below = [b for b in run.seen if run.seen[b].ok and b < target]
        if run.exhausted or target == 1:
            if below:
                return max(below)
            raise JobFailed(f"no size under the safety margin ran (tried {sorted(run.seen)})")
        target = max(1, math.floor(target * (1 - max(margin, 0.1))))


# -- accumulation ------------------------------------------------------------------------------------
def batch_and_accumulation(target_per_device: int, fitting: int) -> tuple[int, int]:
    """Per-device batch and accumulation steps that keep `target_per_device` samples per optimizer step when
    only `fitting` fit: accumulation = ceil(target / fitting), batch = ceil(target / accumulation) <= fitting.
    The product may exceed the target by less than one sample per accumulation step (256 with 100 fitting:
    3 x 86 = 258); the caller scales the LR for what it really is."""
    if target_per_device <= fitting:
        return target_per_device, 1
    accumulation = ar.accumulation_for(target_per_device, fitting)
    return math.ceil(target_per_device / accumulation), accumulation


# -- cache ---------------------------------------------------------------------------------------------
def cache_path() -> Path:
    env = os.environ.get("FASTTRAIN_CACHE")
    root = Path(env).expanduser() if env else Path.home() / ".cache" / "fasttrain"
    return root / CACHE_FILE


def cache_key(*, model: str, image_size: int, precision: str, channels_last: bool, optimizer: str, device_name: str,
              torch_version: str, activation_checkpointing: bool = False) -> str:
    fmt = "channels_last" if channels_last else "contiguous"
    ckpt = "|ckpt" if activation_checkpointing else ""
    return f"v{CACHE_VERSION}|{model}|{image_size}px|{precision}|{fmt}|{optimizer}{ckpt}|{device_name}|torch {torch_version}"


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
    result.from_cache, result.key = True, key
    return result


def store(key: str, result: SearchResult, path: Path | None = None) -> None:
    """Atomic read-modify-write (temp file + rename): a killed run never leaves a half-written cache."""
    path = path or cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = load_cache(path)
    entry = result.to_dict()
    entry.update(from_cache=False, key=key, stored_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    data[key] = entry
    fd, tmp = tempfile.mkstemp(prefix=".batch_cache.", dir=path.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
    os.replace(tmp, path)


# -- the torch runner ------------------------------------------------------------------------------------
def trial_plan(plan: Any, batch: int) -> Any:
    """The plan for one trial: this batch, every step an optimizer step, eager (compiling each size would
    cost minutes; inductor's fused kernels need no more activation memory than eager, so eager is safe)."""
    return dataclasses.replace(plan, batch_size=batch, accumulation_steps=1, compile=False,
                               effective_batch=batch * plan.world_size)


def step_trial(plan: Any, model_factory: Callable[[], Any], *, image_size: int, num_classes: int,
               optim: Any = None, in_chans: int = 3) -> TrialFn:
    """A `try_batch` that runs two full training steps of the real step code at batch n on a fresh model.
    Two, because the first optimizer step allocates the optimizer state: the second step's forward and
    backward run with weights, gradients, optimizer state and activations all alive, the true peak."""
    from fasttrain.train.synthetic import run_synthetic_steps

    def try_batch(batch: int) -> Trial:
        started = time.perf_counter()
        reason = ""
        try:
            model = model_factory()
            out = run_synthetic_steps(trial_plan(plan, batch), model, image_size=image_size, num_classes=num_classes,
                                      steps=1, warmup_steps=1, optim=optim, in_chans=in_chans)
        except Exception as exc:  # noqa: BLE001 - only out-of-memory is a failed trial; the rest propagates
            if not is_out_of_memory(exc):
                raise
            reason = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0][:160]}"
            out = None
        finally:
            model = None  # noqa: F841 - drop our reference before collecting
        if out is None:
            free_device_memory(plan.device, reset_peak_stats=True)
            return Trial(batch, False, reason, time.perf_counter() - started)
        if plan.device == "cuda":  # a success frees its tensors by reference counting; only the allocator cache
            # needs emptying, and the peak counter restarting, so the next trial's peak is its own
            free_device_memory(plan.device, reset_peak_stats=True)
        peak = out["peak_memory_bytes"] if plan.device == "cuda" else None
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


def device_identity(plan: Any) -> tuple[str, str]:
    """(device name for the cache key, torch version)."""
    import torch

    if plan.device == "cuda" and torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        total = torch.cuda.get_device_properties(0).total_memory
        return f"{name} {total / ar.GIB:.0f}GiB", torch.__version__
    return "cpu", torch.__version__


def find_batch(plan: Any, model_name: str, image_size: int, *, num_classes: int = 10, optim: Any = None,
               use_cache: bool = True, path: Path | None = None, max_batch: int | None = None,
               activation_checkpointing: bool = False, model_factory: Callable[[], Any] | None = None
               ) -> SearchResult:
    """The search for this plan and model, from the cache when it holds the same (model, size, precision,
    format, optimizer, device, torch version); otherwise run it and store it."""
    from fasttrain.models.registry import create_model
    from fasttrain.profiles.schema import OptimSpec

    optim = optim or OptimSpec()
    device_name, torch_version = device_identity(plan)
    key = cache_key(model=model_name, image_size=image_size, precision=plan.precision,
                    channels_last=plan.channels_last, optimizer=optim.optimizer, device_name=device_name,
                    torch_version=torch_version, activation_checkpointing=activation_checkpointing)
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

        def factory() -> Any:
            model = create_model(model_name, num_classes)
            enable_activation_checkpointing(model)
            return model
    else:
        def factory() -> Any:
            return create_model(model_name, num_classes)
    factory()  # a bad model name is a UserError now, not an exception inside the first trial
    result = search_largest_batch(step_trial(plan, factory, image_size=image_size, num_classes=num_classes,
                                             optim=optim), start=min(plan.batch_size, limit), max_batch=limit)
    result.key = key
    store(key, result, path)
    return result


def explain(result: SearchResult, batch: int, accumulation: int, target: int, world: int,
            asked: tuple[int, int] | None = None) -> str:
    """One or two sentences: what was found, how, and what the effective batch became. `asked`: the profile's
    (batch, accumulation), named when auto changed them."""
    effective = batch * accumulation * world
    was = (f" (the profile asked {asked[0]} x {asked[1]} accumulation)"
           if asked is not None and asked != (batch, accumulation) else "")
    where = "cached result" if result.from_cache else f"{len(result.trials)} trials"
    if result.capped_by == "max_batch":
        head = (f"batch auto: every size up to the cap {result.largest_ok} ran, no memory limit reached, so "
                f"{result.batch} fits ({where}). ")
    else:
        found = (f"largest that ran {result.largest_ok} (trial cap reached)" if result.capped_by == "max_trials" else
                 f"largest that ran {result.largest_ok}, {result.smallest_failed} ran out of memory")
        head = f"batch auto: {found}; with a {result.margin:.0%} safety margin {result.batch} fits ({where}). "
    if accumulation > 1:
        tail = (f"Using batch {batch} x {accumulation} accumulation steps x {world} devices = effective batch "
                f"{effective} to keep the profile's {target}.")
    elif batch < result.batch:
        tail = (f"Using the profile's batch {batch} (effective {effective}): it fits, so the effective batch is kept; "
                f"set loader.batch_size up to {result.batch} to use the headroom.")
    else:
        tail = f"Using batch {batch} (effective {effective})."
    if was:
        tail = tail.rstrip(".") + was + "."
    if effective != target:
        tail += f" The effective batch differs from the profile's {target}; the LR is scaled for {effective}."
    return head + tail


def resolve_auto_batch(plan: Any, model_name: str, image_size: int, *, num_classes: int = 10, optim: Any = None,
                       use_cache: bool = True, **kwargs: Any) -> tuple[int, int, str]:
    """`--batch-size auto` for train / estimate --measure / bench: -> (per-device batch, accumulation steps,
    message). The target is the plan's samples per device per optimizer step (batch x accumulation).
    Further keywords go to find_batch (path, max_batch, activation_checkpointing, model_factory)."""
    auto = auto_batch(plan, model_name, image_size, num_classes=num_classes, optim=optim, use_cache=use_cache,
                      **kwargs)
    return auto.batch, auto.accumulation, auto.message


def auto_batch(plan: Any, model_name: str, image_size: int, **kwargs: Any) -> AutoBatch:
    result = find_batch(plan, model_name, image_size, **kwargs)
    target = plan.batch_size * max(1, plan.accumulation_steps)
    batch, accumulation = batch_and_accumulation(target, result.batch)
    world = max(1, plan.world_size)
    return AutoBatch(batch, accumulation, batch * accumulation * world, target * world, result,
                     explain(result, batch, accumulation, target * world, world,
                             (plan.batch_size, max(1, plan.accumulation_steps))))


def batch_size_flags(value: str, profile: Any, report: Any, model_name: str,
                     num_classes: int) -> tuple[dict[str, tuple[str, int]], str | None]:
    """`--batch-size N|auto` for train and estimate -> (flags= for presets.resolve, a note for the plan or None).
    N sets the per-device batch; auto runs the search on this machine (cached) and keeps the profile's effective
    batch through accumulation."""
    n = check_batch_option(value)
    if n is not None:
        return {"loader.batch_size": ("--batch-size", n)}, None
    from fasttrain.plan import make_plan
    batch, accumulation, message = resolve_auto_batch(
        make_plan(profile, report), model_name, profile.loader.image_size, num_classes=num_classes,
        optim=profile.optim, activation_checkpointing=profile.speed.activation_checkpointing)
    return auto_flags(batch, accumulation), message


def auto_flags(batch: int, accumulation: int) -> dict[str, tuple[str, int]]:
    """The `flags=` for presets.resolve that apply an auto batch with its provenance ("flag --batch-size auto"),
    so the profile re-validates and make_plan recomputes effective batch, scaled LR and loader RAM."""
    return {"loader.batch_size": ("--batch-size auto", batch),
            "optim.accumulation_steps": ("--batch-size auto", accumulation)}


def check_batch_option(value: str) -> int | None:
    """`--batch-size` parsing shared by the commands: a positive integer, or "auto" (-> None)."""
    if value.strip().lower() == "auto":
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n <= 0:
        raise UserError([Problem("--batch-size", "expected a positive integer or auto", "e.g. --batch-size 64 "
                                 "or --batch-size auto", value)])
    return n
