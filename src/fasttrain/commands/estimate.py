"""`fasttrain estimate`: forecast time, memory, bottleneck and cost of a plan before paying for it.

gather (estimate/gather.py: profile, target machine, meta-device model cost, ceilings, --data sample)
-> compute (estimate/forecast.py, pure) -> render (estimate/view.py, or --json). torch is imported only inside
the command function, never when cli.py imports this module.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from fasttrain.commands import options
from fasttrain.core.errors import Problem, UserError

COMPARE_KINDS = ("presets", "gpus")


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate_cmd)


def estimate_cmd(
    what: Optional[str] = typer.Argument(None, metavar="[presets|gpus]",
                                         help="With --compare: compare presets (default) or GPUs of the spec file."),
    profile: Optional[str] = options.profile_option(),
    model: str = options.model_option(...),
    image_size: Optional[int] = options.image_size_option(),
    dataset_size: Optional[int] = typer.Option(None, "--dataset-size",
                                               help="Training samples (default: ImageNet-1k, 1,281,167)."),
    data: Optional[Path] = typer.Option(None, "--data", help="Image folder or prepared set (fasttrain data prepare): "
                                                             "counts the images and measures decode speed."),
    epochs: Optional[int] = typer.Option(None, "--epochs", help="Epochs (default: profile)."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="Forecast the plan on this GPU from the spec file."),
    num_classes: int = typer.Option(1000, "--num-classes", help="Classifier outputs."),
    sets: Optional[list[str]] = options.set_option(),
    measure: bool = typer.Option(False, "--measure", help="Also run a few real training steps here and compare."),
    measure_steps: int = typer.Option(5, "--measure-steps", min=1, help="Timed steps for --measure."),
    batch_size: Optional[str] = options.batch_size_option(
        help="Per-device batch: a number, or auto (with --measure: the largest batch that runs here, accumulation "
             "keeping the profile's effective batch)."),
    compare: bool = typer.Option(False, "--compare", help="One row per preset (or per GPU: --compare gpus)."),
    nproc_per_node: Optional[int] = options.nproc_per_node_option(),
    nnodes: Optional[int] = options.nnodes_option(),
    as_json: bool = options.json_option(),
) -> None:
    """Forecast a run before paying for it: time, GPU memory, host RAM, bottleneck, MFU and cost."""
    from fasttrain.estimate import gather as g
    from fasttrain.estimate import checks, data_input
    from fasttrain.estimate.compare import compare_rows
    from fasttrain.train.launch import world_flags
    if what is not None and (not compare or what not in COMPARE_KINDS):
        raise UserError([Problem("[presets|gpus]", f"unexpected argument {what!r}",
                                 "use --compare presets or --compare gpus", None)])
    checks.validate_sizes(dataset_size, image_size, epochs, num_classes)
    options.check_name(model, "--model", "a timm or torchvision name, tiny_cnn, or module:callable")
    if gpu is not None:
        options.check_name(gpu, "--gpu", "a GPU of the spec file, e.g. --gpu T4 (fasttrain estimate --compare gpus)")
    if data is not None:
        options.check_path(data, "--data", "an image folder of class sub-folders or a fasttrain data prepare folder")
    if data is not None and dataset_size is not None:
        raise UserError([Problem("--data", "give --data or --dataset-size, not both",
                                 "--data counts the images itself")])
    local = g.local_report() if (profile is None or measure) else None
    ref = profile or _default_profile(local)
    req = g.Request(model=model, num_classes=num_classes, dataset_size=dataset_size or g.IMAGENET_TRAIN_SIZE,
                    dataset_size_source="--dataset-size" if dataset_size else "ImageNet-1k train (default)",
                    epochs_flag=epochs, image_size_flag=image_size, sets=sets or [], gpu=gpu, loader=None,
                    world_flags=world_flags(nproc_per_node, nnodes))
    resolved = g.resolve_profile(ref, req)
    auto_note = _apply_batch_option(batch_size, measure, resolved.profile, req, local) if batch_size else None
    if req.batch_flags:
        resolved = g.resolve_profile(ref, req)
    prof = resolved.profile
    decoding = None
    if data is not None:
        decoding = data_input.decoded_here(data, prof, local, gpu)
        from fasttrain.datasets.decoded import IN_MEMORY
        req.in_memory = IN_MEMORY if decoding else None
        count, sample = data_input.sample_data(data, prof, decoded_once=decoding is not None)
        req.dataset_size, req.loader = count, sample
        req.dataset_size_source = f"--data ({count:,} training images, split as train does)"
    fc, target = g.forecast_for(prof, req, local, gpu_flag=gpu, warning=g.host_warning(resolved))
    checks.check_full_batch(target.plan)
    if auto_note:
        target.plan.notes.append(auto_note)
    notes = g.plain_notes(resolved) + target.plan.notes   # the profile's notes, then the plan's
    if decoding:
        notes.append(f"input: {decoding}")
    payload: dict[str, Any] = {"profile": ref, "target": target.where, "dataset_size_source": req.dataset_size_source,
                               "forecast": fc.to_dict(), "plan_notes": notes}
    measured = _measure(prof, req, local, measure_steps) if measure else None
    if measured is not None:
        payload["measure"] = measured
    rows = None
    if compare:
        rows = compare_rows(what or "presets", prof, req, local)
        payload["compare"] = {"kind": what or "presets", "rows": rows}
    if as_json:
        from fasttrain.core.console import print_json
        print_json(payload)
        return
    from fasttrain.estimate import view as r
    from fasttrain.core.console import console
    out = console()
    r.render_forecast(fc, out, f"[bold]{model}[/] with profile [bold]{ref}[/] on {fc.device['name']} "
                               f"({'as the profile describes it' if target.where == 'profile' else target.where}); "
                               f"data: {req.dataset_size_source}")
    for note in notes:
        out.print(f"note: {note}", highlight=False)
    if measured is not None:
        r.render_measure(measured, out, None if target.where == "this machine" else fc.device["name"])
    if rows is not None:
        r.render_compare(rows, what or "presets", out)


def _apply_batch_option(value: str, measure: bool, prof: Any, req: Any, local: Any) -> str | None:
    """--batch-size N|auto into req.batch_flags; auto searches this machine, so it needs --measure. -> plan note."""
    from fasttrain.train import batch_search
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
    from fasttrain.train import synthetic as trainer
    from fasttrain.models import registry as models
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
