"""`fasttrain train`: parse flags here; gather/plan live in fasttrain/train/setup/prepare.py and the run in
train/run/execute.py (both imported lazily, so this module, which cli.py imports, never imports torch). The dashboard
is built here and handed to the run as its display (a TrainListener), so the training code never imports
the UI."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from fasttrain.commands import options
from fasttrain.train.types import DEFAULT_RDZV_TIMEOUT_S

if TYPE_CHECKING:  # the training modules are imported only when a command runs
    from fasttrain.train.events import RunDisplay
    from fasttrain.train.types import Prepared
    from fasttrain.ui.dashboard import Dashboard


def register(app: typer.Typer) -> None:
    app.command("train")(train_cmd)


def train_cmd(
    ctx: typer.Context,
    profile: str | None = options.profile_option(),
    model: str | None = options.model_option(None, help="timm/torchvision name, tiny_cnn, or module:callable "
                                                "(default: tiny_cnn for shapes/synthetic, resnet18 for a folder)."),
    data: str = typer.Option("shapes", "--data", "-d", metavar="DIR|shapes|synthetic|module:callable",
                             help="ImageFolder tree, the built-in shapes set, random tensors on the device, or "
                                  "your own datasets."),
    epochs: int | None = typer.Option(None, "--epochs", "-e", help="Overrides optim.epochs."),
    batch_size: str | None = options.batch_size_option(),
    sets: list[str] | None = options.set_option(),
    run_name: str | None = typer.Option(None, "--run-name", help="Folder name under --runs-dir (default: "
                                           "date-time-profile)."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where run folders go."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved plan and exit."),
    pretrained: bool = typer.Option(False, "--pretrained", help="Start from the model's ImageNet weights through "
                                    "timm: from the Hugging Face cache, downloaded into it when missing and there "
                                    "is network."),
    weights: str | None = typer.Option(None, "--weights", metavar="FILE",
                                          help="Start from a local weights file (.pth/.pt state_dict, .safetensors, "
                                               "a timm or torchvision checkpoint, a fasttrain run folder): tensors "
                                               "matched by name and shape, the classifier re-made for the classes."),
    seed: int = options.seed_option(),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only errors and the final summary."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Every note on how the run works (threads, "
                                 "allocator, input path, tuning) before the first step; they are in summary.json "
                                 "either way."),
    as_json: bool = options.json_option(help="Print the plan (--dry-run) or the final summary as JSON; "
                                        "progress goes to stderr."),
    image_size: int | None = options.image_size_option(),
    num_classes: int | None = typer.Option(None, "--num-classes", help="Classes for synthetic data or a "
                                              "custom dataset that cannot tell."),
    save_every: int | None = typer.Option(None, "--save-every", metavar="N",
                                             help="Also keep a checkpoint every N epochs (last.pt and the model "
                                                  "files are always written)."),
    no_last: bool = typer.Option(False, "--no-last", help="Write no last.pt (checkpoint.save_last: false): a short "
                                 "run keeps only its model files, and cannot be resumed."),
    strict_data: bool = typer.Option(False, "--strict-data", help="Stop at the first unreadable image instead "
                                     "of skipping and counting it."),
    resume: str | None = typer.Option(None, "--resume", metavar="RUN_DIR|FILE|auto",
                                         help="Continue a run from its newest checkpoint (auto: the newest valid one "
                                              "of --run-name, or of the latest run); its flags are reused unless "
                                              "given again."),
    on_nan: str = typer.Option("stop", "--on-nan", metavar="stop|skip",
                               help="Non-finite loss/gradients: steps are always skipped; stop after 3 in a row "
                                    "(default) or keep skipping."),
    save_every_minutes: float | None = options.save_every_minutes_option(),
    nproc_per_node: int | None = typer.Option(None, "--nproc-per-node", metavar="N", rich_help_panel="Several GPUs",
                                                 help="Data-parallel: start N processes on this machine (one per GPU; "
                                                      "gloo processes on a CPU) through torch.distributed.run."),
    nnodes: int = typer.Option(1, "--nnodes", metavar="M", rich_help_panel="Several GPUs",
                               help="Machines in the job; run the same command on each."),
    node_rank: int = typer.Option(0, "--node-rank", metavar="R", rich_help_panel="Several GPUs",
                                  help="This machine's index, 0..M-1 (node 0 writes the checkpoints)."),
    rdzv_endpoint: str | None = typer.Option(None, "--rdzv-endpoint", metavar="HOST:PORT",
                                                rich_help_panel="Several GPUs",
                                                help="Where node 0 waits for the others (needed with --nnodes > 1)."),
    no_tune: bool = typer.Option(False, "--no-tune", help="Skip the short timed trial of the candidate speed "
                                 "settings before the first epoch, the A/B of the first steps (threads, CPU "
                                 "precision) and any cached result of them."),
    time_budget: str | None = typer.Option(None, "--time-budget", metavar="DURATION", rich_help_panel="Time budget",
                                              help="The whole run's time (90s, 15m, 2h, 1h30m): the schedule ends at "
                                                   "it, with the last validation and checkpoint inside it."),
    deadline: str | None = typer.Option(None, "--deadline", metavar="HH:MM", rich_help_panel="Time budget",
                                           help="Be done by this time of day (local clock)."),
    max_cost: float | None = typer.Option(None, "--max-cost", metavar="USD", rich_help_panel="Time budget",
                                             help="Spend at most this, at the profile's hourly price."),
    rdzv_timeout: int = typer.Option(DEFAULT_RDZV_TIMEOUT_S, "--rdzv-timeout", metavar="SECONDS",
                                     rich_help_panel="Several GPUs",
                                     help="How long the machines get to find each other."),
) -> object:  # for the Python API: the Prepared run (dry run) or the summary; None on the command line
    """Train a model with the profile's speed settings, showing where each step's time goes."""
    from fasttrain.core.console import console, print_json
    from fasttrain.train.run import execute as train_run
    from fasttrain.train.setup import prepare as train_prep
    from fasttrain.train.setup.budget_args import parse_duration
    from fasttrain.train.types import LaunchSpec, TrainArgs, parse_batch_size

    given = _given(ctx)
    multi = {"nnodes", "node_rank", "rdzv_endpoint", "rdzv_timeout"} & given
    if multi and nproc_per_node is None:
        from fasttrain.core.errors import Problem, UserError
        raise UserError([Problem("--" + sorted(multi)[0].replace("_", "-"), "only means something with "
                                 "--nproc-per-node", "add --nproc-per-node N (processes on this machine)")])
    launch = LaunchSpec(nproc_per_node, nnodes, node_rank, rdzv_endpoint, rdzv_timeout) \
        if nproc_per_node is not None else None

    args = TrainArgs(profile=profile, model=model, data=data, epochs=epochs, sets=list(sets or []),
                               run_name=run_name, runs_dir=runs_dir, dry_run=dry_run, pretrained=pretrained,
                               weights=weights, seed=seed, quiet=quiet, verbose=verbose, json=as_json,
                               image_size=image_size, num_classes=num_classes, save_every=save_every,
                               strict_data=strict_data, no_last=no_last,
                               resume=resume, on_nan=on_nan, save_every_minutes=save_every_minutes,
                               batch_size=parse_batch_size(batch_size) if batch_size is not None else None,
                               launch=launch, no_tune=no_tune, deadline=deadline, max_cost=max_cost,
                               time_budget=parse_duration(time_budget) if time_budget is not None else None,
                               explicit=given)
    api = options.api_call(ctx)  # fasttrain.train() / fasttrain.plan() (api/): return the result, print nothing
    prep = train_prep.prepare(args)  # prep.args: the values the run trains with (a resume's, a worker's)
    if dry_run or prep.args.launch is not None:
        from fasttrain.models.registry import create_model
        create_model(prep.model_name, prep.bundle.num_classes,  # an unknown model fails here; a dry run downloads
                     pretrained=pretrained and not dry_run, image_size=prep.plan.image_size)  # nothing
    if dry_run and api is not None:
        return prep
    if dry_run:
        from fasttrain.train.setup.plan_view import plan_lines, plan_view
        view = plan_view(prep)
        if as_json:
            print_json(view)
        else:
            out = console()
            for line in plan_lines(view):
                out.print(line, markup=False)
        return
    if prep.args.launch is not None:  # this process is the agent: the workers train
        from fasttrain.train.signals.lifecycle import train_signals
        train_signals.hand_over()  # torch.distributed.run's agent forwards signals to its workers
        raise typer.Exit(_launch(prep, api.started_at if api is not None else None))
    from fasttrain.train.signals.lifecycle import train_signals
    try:
        summary = train_run.execute(prep, display=(api.display if api is not None else None) or _dashboard,
                                    launched_at=api.started_at if api is not None else None)
        if prep.is_main and summary.get("run_dir"):  # report.html, the run's plots (a stopped run's too)
            from fasttrain.report import report_after_run
            report_after_run(Path(summary["run_dir"]))
        if as_json and prep.is_main:
            print_json(summary)
    finally:
        train_signals.command_done()
    if api is not None:
        return summary
    if summary.get("exit_code"):  # stopped by SIGINT: 130 (SIGTERM stops cleanly: 0)
        raise typer.Exit(summary["exit_code"])


def _launch(prep: Prepared, started_at: float | None) -> int:
    """Start the workers with this command line minus the launch flags; -> the job's exit code. The workers'
    clock (a time budget, the time to accuracy) starts at `started_at` (the API call) or this process's start."""
    from fasttrain.train.parallel import launch
    from fasttrain.train.run.opening import process_started_at
    spec, plan = prep.args.launch, prep.plan
    assert spec is not None
    threads = None
    if plan.device == "cpu":
        threads = launch.cpu_threads_per_process(prep.report.cores, spec.nproc_per_node, plan.workers)
    return launch.launch(spec, launch.strip_launch_flags(launch.invoked_argv()), omp_threads=threads,
                         started_at=started_at if started_at is not None else process_started_at())


def _dashboard(display: RunDisplay) -> Dashboard:
    """The run's display: live on a terminal, plain lines under --json, off one or in a notebook's cell (its
    pseudo-terminal shows no redraw), only errors with --quiet."""
    from fasttrain.core.console import in_notebook_cell
    from fasttrain.ui.dashboard import Dashboard, choose_mode
    plain = display.plain or in_notebook_cell()
    mode = "quiet" if display.quiet else ("plain" if plain else choose_mode(False, display.stream))
    return Dashboard(display.plan, total_batches=display.total_batches, epochs=display.epochs, mode=mode,
                     stream=display.stream, report=display.report, telemetry=display.telemetry,
                     forecast=display.forecast, data_kind=display.data_kind, measured=display.measured,
                     input_gain=display.input_gain, classes=display.classes, deadline=display.deadline)


def _given(ctx: typer.Context) -> set[str]:
    """Parameters set on the command line (or by env): on --resume they win over the checkpoint's own."""
    given = set()
    for name in ctx.params:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
            given.add(name)
    return given
