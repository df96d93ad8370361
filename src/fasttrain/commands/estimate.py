"""`fasttrain estimate`: forecast time, memory, bottleneck and cost of a plan before paying for it.

Flags parsed into an EstimateRequest, the forecast made by bench/estimate_job.py (the same call fasttrain.estimate()
makes: gather, compute, --measure, --compare), its Estimate rendered (estimate/view.py, or --json). torch is
imported only inside the command function, never when cli.py imports this module.
"""
from __future__ import annotations

from pathlib import Path

import typer

from fasttrain.commands import options


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate_cmd)


def estimate_cmd(
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
) -> None:
    """Forecast a run before paying for it: time, GPU memory, host RAM, bottleneck, MFU and cost."""
    from fasttrain.bench.estimate_job import EstimateRequest, run_estimate
    est = run_estimate(EstimateRequest(
        model=model, what=what, profile=profile, image_size=image_size, dataset_size=dataset_size, data=data,
        epochs=epochs, gpu=gpu, num_classes=num_classes, sets=list(sets or []), measure=measure,
        measure_steps=measure_steps, batch_size=batch_size, compare=compare, nproc_per_node=nproc_per_node,
        nnodes=nnodes, time_budget=time_budget))
    # render
    if as_json:
        from fasttrain.core.console import print_json
        print_json(est.to_dict())
        return
    from fasttrain.core.console import console
    from fasttrain.estimate.view import render_estimate
    render_estimate(est, model, console())
