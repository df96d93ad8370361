"""`fasttrain estimate`: forecast time, memory, bottleneck and cost of a plan before paying for it.

gather (estimate/gather.py: profile, target machine, meta-device model cost, ceilings; estimate/data_input.py: the
--data sample; --measure's steps here; estimate/compare.py: --compare's forecasts) -> compute (estimate/result.py,
pure: the notes and the payload, over estimate/forecast.py) -> render (estimate/view.py, or --json). torch is
imported only inside the command function, never when cli.py imports this module.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer

from fasttrain.commands import options
from fasttrain.core.errors import Problem, UserError

COMPARE_KINDS = ("presets", "gpus")


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate_cmd)


def estimate_cmd(
    ctx: typer.Context,
    what: str | None = typer.Argument(None, metavar="[presets|gpus]",
                                         help="With --compare: compare presets (default) or GPUs of the spec file."),
    profile: str | None = options.profile_option(),
    model: str = options.model_option(...),
    image_size: int | None = options.image_size_option(),
    dataset_size: int | None = typer.Option(None, "--dataset-size",
                                               help="Training samples (default: ImageNet-1k, 1,281,167)."),
    data: Path | None = typer.Option(None, "--data", help="Image folder, labels table (train.csv) or prepared set "
                                                             "(fasttrain data prepare): counts the images and "
                                                             "measures decode speed."),
    epochs: int | None = typer.Option(None, "--epochs", help="Epochs (default: profile)."),
    gpu: str | None = typer.Option(None, "--gpu", help="Forecast the plan on this GPU from the spec file."),
    num_classes: int = typer.Option(1000, "--num-classes", help="Classifier outputs."),
    sets: list[str] | None = options.set_option(),
    measure: bool = typer.Option(False, "--measure", help="Also run a few real training steps here and compare."),
    measure_steps: int = typer.Option(5, "--measure-steps", min=1, help="Timed steps for --measure."),
    batch_size: str | None = options.batch_size_option(
        help="Per-device batch: a number, or auto (with --measure: the largest batch that runs here, accumulation "
             "keeping the profile's effective batch)."),
    compare: bool = typer.Option(False, "--compare", help="One row per preset (or per GPU: --compare gpus)."),
    nproc_per_node: int | None = options.nproc_per_node_option(),
    nnodes: int | None = options.nnodes_option(),
    time_budget: str | None = typer.Option(None, "--time-budget", metavar="DURATION",
                                              help="What a budget (90s, 15m, 2h, 1h30m) buys: epochs and images."),
    as_json: bool = options.json_option(),
) -> object:  # for the Python API: the Estimate; None on the command line
    """Forecast a run before paying for it: time, GPU memory, host RAM, bottleneck, MFU and cost."""
    from fasttrain.estimate import gather as g
    from fasttrain.train.parallel.launch import world_flags
    if what is not None and (not compare or what not in COMPARE_KINDS):
        raise UserError([Problem("[presets|gpus]", f"unexpected argument {what!r}",
                                 "use --compare presets or --compare gpus", None)])
    _check_flags(model, gpu, data, dataset_size, image_size, epochs, num_classes)
    from fasttrain.estimate.compare import compare_rows
    from fasttrain.estimate.data_input import with_data
    from fasttrain.estimate.result import estimate_result
    # gather: this machine when needed, the profile with every flag, --data, the forecast on its target
    local = g.local_report() if (profile is None or measure) else None
    ref = profile or _default_profile(local)
    req = g.Request(model=model, num_classes=num_classes, dataset_size=dataset_size or g.IMAGENET_TRAIN_SIZE,
                    dataset_size_source=f"--dataset-size ({dataset_size:,} training images)" if dataset_size
                    else g.ASSUMED_DATA,
                    epochs_flag=epochs, image_size_flag=image_size, sets=sets or [], gpu=gpu, loader=None,
                    world_flags=world_flags(nproc_per_node, nnodes), val_size=g.val_size_for(dataset_size))
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
    if time_budget is not None:
        from fasttrain.estimate.result import budget_buys
        from fasttrain.train.setup.budget_args import parse_duration
        est = dataclasses.replace(est, budget=budget_buys(parse_duration(time_budget), fc))
    if measure:
        est = dataclasses.replace(est, measured=_measure(prof, req, local, measure_steps))
    if compare:
        est = dataclasses.replace(est, compare_rows=compare_rows(what or "presets", prof, req, local),
                                  compare_kind=what or "presets")
    # render
    if options.api_call(ctx) is not None:  # fasttrain.estimate() (api/): the result, printed by nobody
        return est
    if as_json:
        from fasttrain.core.console import print_json
        print_json(est.to_dict())
        return
    from fasttrain.core.console import console
    from fasttrain.estimate.view import render_estimate
    render_estimate(est, model, console())


def _check_flags(model: str, gpu: str | None, data: Path | None, dataset_size: int | None, image_size: int | None,
                 epochs: int | None, num_classes: int) -> None:
    """The flags' own refusals (exit 2), before anything is probed or resolved."""
    from fasttrain.estimate.checks import validate_sizes
    validate_sizes(dataset_size, image_size, epochs, num_classes)
    options.check_name(model, "--model", "a timm or torchvision name, tiny_cnn, or module:callable")
    if gpu is not None:
        options.check_name(gpu, "--gpu", "a GPU of the spec file, e.g. --gpu T4 (fasttrain estimate --compare gpus)")
    if data is not None:
        options.check_path(data, "--data", "an image folder of class sub-folders or a fasttrain data prepare folder")
    if data is not None and dataset_size is not None:
        raise UserError([Problem("--data", "give --data or --dataset-size, not both",
                                 "--data counts the images itself")])


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
    from fasttrain.profiles import recommend
    return recommend.best_preset(local)


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
