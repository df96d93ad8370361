"""One training job from its arguments to its result: prepare -> (a dry run's plan | the launch of a data-parallel
job | execute) -> the run's report.html -> a typed outcome. `fasttrain train` (commands/train.py) and
fasttrain.train() / fasttrain.plan() (api/calls.py) both call `train_job` with a TrainArgs and render or return what
it gives back; neither runs the other.

It lives in report/ because it writes the run's report.html after the run (report/after_run.py), which is above
train/ and ui/; the training itself is train/setup/prepare.py and train/run/execute.py. Python objects handed to the
API (TrainArgs.inputs) are registered under their names for the length of the job (core/given.py says why).
Imports nothing heavy at module level.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from fasttrain.train.loop.events import DisplayFactory, RunDisplay
    from fasttrain.train.run.summary_record import RunSummary
    from fasttrain.train.types import Prepared, TrainArgs
    from fasttrain.ui.dashboard import Dashboard


@dataclass(frozen=True)
class TrainOutcome:
    """What a training job ended with. `summary`: the run's (also summary.json), None for a dry run and for the
    launcher of a data-parallel job; `view`: a dry run's plan as `train --dry-run` shows it (setup/plan_view.py);
    `exit_code`: the command's (a stop by SIGINT 130, a data-parallel job's own code, else 0)."""

    prep: Prepared
    summary: RunSummary | None = None
    view: dict[str, Any] | None = None
    exit_code: int = 0


def terminal_dashboard(display: RunDisplay) -> Dashboard:
    """The run's display on a terminal: live on a terminal, plain lines under --json, off one or in a notebook's
    cell (its pseudo-terminal shows no redraw), only errors with --quiet."""
    from fasttrain.core.console import in_notebook_cell
    from fasttrain.ui.dashboard import Dashboard, choose_mode
    plain = display.plain or in_notebook_cell()
    mode = "quiet" if display.quiet else ("plain" if plain else choose_mode(False, display.stream))
    return Dashboard(display.plan, total_batches=display.total_batches, epochs=display.epochs, mode=mode,
                     stream=display.stream, report=display.report, telemetry=display.telemetry,
                     forecast=display.forecast, data_kind=display.data_kind, measured=display.measured,
                     input_gain=display.input_gain, classes=display.classes, deadline=display.deadline)


def train_job(args: TrainArgs, *, display: DisplayFactory = terminal_dashboard, started_at: float | None = None,
              on_summary: Callable[[dict[str, Any]], None] | None = None) -> TrainOutcome:
    """Run `args` as `fasttrain train` does. `display`: the run's progress (the terminal's dashboard, a notebook's
    view); `started_at`: time.time() the run's clock starts from (an API call's start; default: this process's);
    `on_summary`: called with the main process's summary as summary.json holds it (RunSummary.to_json()), before a
    late SIGTERM kills again (`--json`'s print)."""
    from fasttrain.core.given import registered
    from fasttrain.train.setup.prepare import prepare
    with registered(args.inputs):
        prep = prepare(args)  # prep.args: the values the run trains with (a resume's, a worker's)
        if args.dry_run or prep.args.launch is not None:
            from fasttrain.models.registry import create_model
            create_model(prep.model_name, prep.bundle.num_classes,  # an unknown model fails here; a dry run
                         pretrained=args.pretrained and not args.dry_run,  # downloads nothing
                         image_size=prep.plan.image_size)
        if args.dry_run:
            from fasttrain.train.setup.plan_view import plan_view
            return TrainOutcome(prep, view=plan_view(prep))  # the view's forecast reads the model: still registered
        from fasttrain.train.signals.lifecycle import train_signals
        if prep.args.launch is not None:  # this process is the agent: the workers train
            train_signals.hand_over()  # torch.distributed.run's agent forwards signals to its workers
            return TrainOutcome(prep, exit_code=_launch(prep, started_at))
        try:
            summary = _run(prep, display, started_at)
            if on_summary is not None and prep.is_main:
                on_summary(summary.to_json())
        finally:
            train_signals.command_done()
    return TrainOutcome(prep, summary, exit_code=summary.exit_code)


def _run(prep: Prepared, display: DisplayFactory, started_at: float | None) -> RunSummary:
    """The run, then its report.html (a stopped run's too) on the process that writes the run folder."""
    from fasttrain.train.run.execute import execute
    summary = execute(prep, display=display, launched_at=started_at)
    if prep.is_main and summary.run_dir:
        from fasttrain.report.after_run import report_after_run
        report_after_run(Path(summary.run_dir))
    return summary


def _launch(prep: Prepared, started_at: float | None) -> int:
    """Start the workers with this command line minus the launch flags; -> the job's exit code. The workers'
    clock (a time budget, the time to accuracy) starts at `started_at` or this process's start."""
    from fasttrain.train.parallel import launch
    from fasttrain.train.run.start_time import process_started_at
    spec, plan = prep.args.launch, prep.plan
    assert spec is not None
    threads = None
    if plan.device == "cpu":
        threads = launch.cpu_threads_per_process(prep.report.cores, spec.nproc_per_node, plan.workers)
    return launch.launch(spec, launch.strip_launch_flags(launch.invoked_argv()), omp_threads=threads,
                         started_at=started_at if started_at is not None else process_started_at())
