"""`fasttrain train`: flags parsed into a TrainArgs (train/setup/args.py train_args, the same call fasttrain.train()
makes), the job run by report/train_job.py (prepare -> execute -> report.html), and what it gives back rendered: the
terminal's dashboard as the run's display (a TrainListener, so the training code never imports the UI), a dry run's
plan, --json's summary, the exit code. Everything heavy is imported inside the function: cli.py imports this module
for `fasttrain --help`."""
from __future__ import annotations

from pathlib import Path

import typer

from fasttrain.commands import options
from fasttrain.train.types import DEFAULT_RDZV_TIMEOUT_S


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
) -> None:
    """Train a model with the profile's speed settings, showing where each step's time goes."""
    from fasttrain.core.console import console, print_json
    from fasttrain.report.train_job import terminal_dashboard, train_job
    from fasttrain.train.setup.args import train_args

    values = {name: value for name, value in locals().items() if name in ctx.params}  # this command's parameters
    args = train_args(values, explicit=_given(ctx))
    outcome = train_job(args, display=terminal_dashboard, on_summary=print_json if as_json else None)
    if outcome.view is not None:  # --dry-run
        if as_json:
            print_json(outcome.view)
        else:
            from fasttrain.train.setup.plan_view import plan_lines
            out = console()
            for line in plan_lines(outcome.view):
                out.print(line, markup=False)
    if outcome.exit_code:  # stopped by SIGINT: 130 (SIGTERM stops cleanly: 0); a data-parallel job's own code
        raise typer.Exit(outcome.exit_code)


def _given(ctx: typer.Context) -> set[str]:
    """Parameters set on the command line (or by env): on --resume they win over the checkpoint's own."""
    given = set()
    for name in ctx.params:
        source = ctx.get_parameter_source(name)
        if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
            given.add(name)
    return given
