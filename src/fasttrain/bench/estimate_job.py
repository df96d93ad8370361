"""One forecast from its request to its result: `fasttrain estimate`'s gather (profile, target machine, the model's
cost on the meta device, --data's sample) -> compute (estimate/result.py) -> with --measure a few real training steps
here, with --compare one forecast per preset or GPU -> an Estimate. `fasttrain estimate` (commands/estimate.py)
renders it; fasttrain.estimate() (api/calls.py) returns it.

It lives in bench/, the first layer above both estimate/ (the forecast) and train/ (--measure's steps, --batch-size
auto's search, --time-budget's parsing, the world's flags). A model handed to the API as an object
(EstimateRequest.inputs) is registered under its name for the length of the job (core/given.py says why).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.core.errors import Problem, UserError

if TYPE_CHECKING:
    from fasttrain.core.given import GivenInputs
    from fasttrain.estimate.result import Estimate

COMPARE_KINDS = ("presets", "gpus")


@dataclass(frozen=True)
class EstimateRequest:
    """What estimate is asked, by `fasttrain estimate`'s parameter names (--json is the command's own)."""

    model: str
    what: str | None = None               # with --compare: "presets" (default) or "gpus"
    profile: str | None = None
    image_size: int | None = None
    dataset_size: int | None = None
    data: Path | None = None
    epochs: int | None = None
    gpu: str | None = None
    num_classes: int = 1000
    sets: list[str] = dataclasses.field(default_factory=list)
    measure: bool = False
    measure_steps: int = 5
    batch_size: str | None = None
    compare: bool = False
    nproc_per_node: int | None = None
    nnodes: int | None = None
    time_budget: str | None = None
    inputs: GivenInputs | None = None     # a model handed to fasttrain.estimate() as an object


def run_estimate(req: EstimateRequest) -> Estimate:
    """The forecast (and --measure's, --compare's rows); bad input raises UserError before anything is measured."""
    from fasttrain.core.given import registered
    with registered(req.inputs):
        return _estimate(req)


def _estimate(ask: EstimateRequest) -> Estimate:
    from fasttrain.estimate import gather as g
    what, profile, model, data, gpu = ask.what, ask.profile, ask.model, ask.data, ask.gpu
    image_size, dataset_size, epochs, num_classes = ask.image_size, ask.dataset_size, ask.epochs, ask.num_classes
    measure, compare, batch_size = ask.measure, ask.compare, ask.batch_size
    from fasttrain.train.parallel.launch import world_flags
    if what is not None and (not compare or what not in COMPARE_KINDS):
        raise UserError([Problem("[presets|gpus]", f"unexpected argument {what!r}",
                                 "use --compare presets or --compare gpus", None)])
    from fasttrain.estimate.checks import check_flags
    check_flags(model, gpu, data, dataset_size, image_size, epochs, num_classes)
    from fasttrain.estimate.compare import compare_rows
    from fasttrain.estimate.data_input import with_data
    from fasttrain.estimate.result import estimate_result
    # gather: this machine when needed, the profile with every flag, --data, the forecast on its target
    local = g.local_report() if (profile is None or measure) else None
    ref = profile or _default_profile(local)
    req = g.Request(model=model, num_classes=num_classes, dataset_size=dataset_size or g.IMAGENET_TRAIN_SIZE,
                    dataset_size_source=f"--dataset-size ({dataset_size:,} training images)" if dataset_size
                    else g.ASSUMED_DATA,
                    epochs_flag=epochs, image_size_flag=image_size, sets=list(ask.sets), gpu=gpu, loader=None,
                    world_flags=world_flags(ask.nproc_per_node, ask.nnodes), val_size=g.val_size_for(dataset_size))
    resolved = g.resolve_profile(ref, req)
    auto_note = None
    if batch_size:
        req, auto_note = _with_batch_option(batch_size, measure, resolved.profile, req, local)
    if req.batch_flags:
        resolved = g.resolve_profile(ref, req)
    data_notes: list[str] = []
    if data is not None:
        from fasttrain.estimate.data_input import checked_augment
        resolved, data_notes = checked_augment(data, resolved)
    prof = resolved.profile
    req, decoding = with_data(req, data, prof, local, gpu) if data is not None else (req, None)
    fc, target = g.forecast_for(prof, req, local, gpu_flag=gpu, warning=g.host_warning(resolved))
    # compute (refused here, before --measure or --compare spend any time, when no full batch fits)
    est = estimate_result(ref, resolved, fc, target, req.dataset_size_source, auto_note, decoding, data_notes)
    if ask.time_budget is not None:
        from fasttrain.estimate.result import budget_buys
        from fasttrain.train.setup.budget_args import parse_duration
        est = dataclasses.replace(est, budget=budget_buys(parse_duration(ask.time_budget), fc))
    if measure:
        est = dataclasses.replace(est, measured=_measure(prof, req, local, ask.measure_steps))
    if compare:
        est = dataclasses.replace(est, compare_rows=compare_rows(what or "presets", prof, req, local),
                                  compare_kind=what or "presets")
    return est


def _with_batch_option(value: str, measure: bool, prof: Any, req: Any, local: Any) -> tuple[Any, str | None]:
    """(a new request with --batch-size N|auto in its batch_flags, the plan note); `req` is left as it was."""
    new = dataclasses.replace(req)
    return new, _apply_batch_option(value, measure, prof, new, local)


def _apply_batch_option(value: str, measure: bool, prof: Any, req: Any, local: Any) -> str | None:
    """--batch-size N|auto into req.batch_flags; auto searches this machine, so it needs --measure. -> plan note."""
    from fasttrain.train.setup import batch_search
    if batch_search.check_batch_option(value) is None and not measure:
        raise UserError([Problem("--batch-size", "auto finds the largest batch by running steps on this machine",
                                 "add --measure, or give a number", value)])
    req.batch_flags, note = batch_search.batch_size_flags(value, prof, local, req.model, req.num_classes)
    return note


def _default_profile(local: Any) -> str:
    from fasttrain.profiles import preset_match
    return preset_match.best_preset(local)


def _measure(prof: Any, req: Any, local: Any, steps: int) -> dict[str, Any]:
    """Forecast the plan on THIS machine and run it for a few steps with the train step code."""
    from fasttrain.estimate import gather as g
    from fasttrain.models import registry as models
    from fasttrain.train.loop import synthetic as trainer
    fc, target = g.forecast_for(prof, req, local, force_local=True)
    net = models.create_model(req.model, num_classes=req.num_classes)
    got = trainer.run_synthetic_steps(target.plan, net, image_size=target.plan.image_size,
                                      num_classes=req.num_classes, steps=steps, warmup_steps=2, optim=prof.optim)
    on_gpu = fc.device["kind"] == "gpu"
    peak = fc.memory.total - fc.memory.workspace if on_gpu else fc.memory.total + fc.host_ram.processes
    return {
        "device": fc.device["name"], "steps": steps,
        "forecast_for": "this CPU" if fc.device["kind"] == "cpu" else f"this machine's {fc.device['name']}",
        "forecast": {"images_per_s": fc.speed["images_per_s_per_device"], "step_time_s": fc.speed["step_time_s"],
                     "peak_memory_bytes": peak},
        "measured": got,
        "note": ("peak memory: CUDA peak allocated vs forecast without context/workspace" if on_gpu else
                 "peak memory: the process's peak resident set (torch itself included) vs forecast training "
                 "state + process overhead; loader workers are not running in this measurement"),
    }
