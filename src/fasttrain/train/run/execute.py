"""`fasttrain train` after the plan: build the model and loaders, train, report.

execute() runs what setup/prepare.py prepared: the tuning trial (when one is due), the model, the loaders, the run
folder and its log (opening.py), telemetry, the step engine and the Trainer (assemble.py), with the command's
display as a TrainListener (loop/events.py: the training code never imports the UI). A torchrun worker first joins
the process group (parallel/ddp.py) and trains its shard; only rank 0 draws, logs and writes checkpoints.
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TextIO

from fasttrain.core.given import is_given
from fasttrain.train.loop.events import DisplayFactory, Listeners, RunDisplay, RunEnd, RunLogListener, TrainListener
from fasttrain.train.run import opening
from fasttrain.train.run.assemble import RunParts, make_trainer
from fasttrain.train.run.earlier_measurements import input_gain, measured_here
from fasttrain.train.run.export import write_model_files
from fasttrain.train.run.run_clock import resumed_clock
from fasttrain.train.run.start_time import run_started_at
from fasttrain.train.run.summary import (
    RunSummary,
    budget_report,
    final_verdict,
    resume_command,
    run_summary,
    with_faults,
    with_stop,
)
from fasttrain.train.run.summary_parts import ForecastFigures
from fasttrain.train.run.time_budget import display_epochs, fit_epochs, time_budget
from fasttrain.train.setup.plan_view import classes_text, opening_notes, plan_notes, weights_words
from fasttrain.train.state.rng import seed_everything
from fasttrain.train.trial.tune import forecast_for_run
from fasttrain.train.types import Prepared

if TYPE_CHECKING:
    import torch

    from fasttrain.train.parallel.ddp import DistContext


def execute(prep: Prepared, *, display: DisplayFactory | None = None, stream: TextIO | None = None,
            launched_at: float | None = None) -> RunSummary:
    """Train; returns the summary (also written to summary.json). A torchrun worker joins its job first.
    `display`: the command's display (its dashboard), built from a RunDisplay once the loaders exist;
    None shows nothing. `launched_at`: time.time() the run's clock starts from (time to accuracy, the time
    budget); default: when this process (a torchrun worker: its launcher) started, so the command's own start-up
    counts."""
    from fasttrain.train.parallel import ddp
    launched = launched_at if launched_at is not None else run_started_at(prep.world)
    with ddp.joined(prep.world, prep.plan.device) as dist:
        try:
            return _execute(prep, stream, dist, display or _no_display, launched)
        finally:  # on a GPU what the run held is handed back now (a notebook's next cell): torch's first optimizer
            if prep.plan.device == "cuda":  # imports torch._dynamo, whose import keeps the frames that called it
                from fasttrain.train.loop.oom import free_device_memory  # (the engine's builders) until a collection
                free_device_memory("cuda")


@contextlib.contextmanager
def _no_display(spec: RunDisplay) -> Iterator[TrainListener]:
    yield Listeners()


def _execute(prep: Prepared, stream: TextIO | None, dist: DistContext | None, display: DisplayFactory,
             launched_at: float) -> RunSummary:
    from fasttrain.models.registry import run_model
    from fasttrain.telemetry.recorder import Telemetry

    tuning: dict[str, Any] = {}
    tuned = dist is None and not prep.args.no_tune and not prep.tuning
    budget = time_budget(prep, launched_at)
    # The forecast is shown beside the run, its step time tells the trial whether it can afford anything and
    # plans a time budget's first steps.
    wanted = prep.shows_progress or tuned or budget is not None
    forecast = forecast_for_run(prep) if wanted and prep.bundle.kind != "custom" else None
    if dist is None:  # before the seed: the trial's models do not move the run's random numbers
        from fasttrain.train.trial.tune import tune_prepared
        prep, tuning = tune_prepared(prep, (forecast or {}).get("step_time_s"))
    args, plan, main = prep.args, prep.plan, prep.is_main
    # Ranks other than 0 draw nothing and write nothing: their display talks to a sink.
    out = (stream if stream is not None else (sys.stderr if args.json else sys.stdout)) if main else io.StringIO()
    seed_everything(args.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = run_model(prep.model_name, prep.bundle.num_classes,  # the API's own object; a resume's checkpoint
                      pretrained=args.pretrained and prep.resume is None,  # holds its weights: none fetched
                      image_size=plan.image_size)
    if prep.init is not None:  # --weights, matched in prepare; on the CPU, before anything moves the model
        from fasttrain.models.weights import load_into
        load_into(model, prep.init)
    train_loader, val_loader, epoch_sampler, batches = opening.open_data(prep, dist)
    run_dir = opening.run_folder(prep, dist)
    if main and tuning:
        from fasttrain.core.files import write_text_atomic
        write_text_atomic(run_dir / "tuning.json", json.dumps(tuning, indent=1, default=str))
    run = RunParts(prep, train_loader, val_loader, epoch_sampler, batches, dist, run_dir,
               runlog=opening.open_runlog(prep, run_dir) if main else None,
               telemetry=Telemetry(plan.device) if main else None,
               forecast=forecast if prep.shows_progress else None, started=time.perf_counter(),
               clock=resumed_clock(prep.resume, launched_at), tuning=tuning, budget=budget[0] if budget else None,
               budget_source=budget[1] if budget else None,
               first_step_s=(forecast or {}).get("step_time_s"))
    epochs = display_epochs(prep, run.budget, run.first_step_s, batches)
    with display(RunDisplay(plan, total_batches=batches * epochs, epochs=epochs, stream=out, report=prep.report,
                            telemetry=run.telemetry, forecast=run.forecast, quiet=not prep.shows_progress,
                            plain=args.json, data_kind=prep.bundle.kind, measured=measured_here(prep),
                            input_gain=input_gain(prep) if main else None,
                            classes=classes_text(prep.bundle.num_classes, prep.bundle.class_names),
                            deadline=budget[0].deadline if budget else None)) as listener:
        listener.on_run_start(plan, opening_notes(prep, model))
        if words := weights_words(prep):  # where the starting weights come from (--weights' counts, the cache)
            listener.on_message(f"weights: {words}")
        if tuning and (args.verbose or "skipped" not in tuning):
            from fasttrain.train.trial.choice import tuning_line
            listener.on_message("tuning: " + tuning_line(tuning))
        summary = _train(run, model, listener)
    if summary.stopped and main:  # a stop request ended the run: say where and how to resume
        print(summary.stop_message, file=sys.stderr, flush=True)
    return summary


def _train(run: RunParts, model: torch.nn.Module, listener: TrainListener) -> RunSummary:
    """Fit; -> the summary, also told to the run log and the display. A stop request ends in a summary too."""
    import torch

    from fasttrain.train.loop.outcome import Interrupted
    from fasttrain.train.signals.lifecycle import GracefulStop, train_signals

    prep, runlog = run.prep, run.runlog
    profile = prep.resolved.profile
    resume_cmd = resume_command(run.run_dir, profile.world.nodes, profile.world.gpus_per_node,
                                python=is_given(prep.model_name) or is_given(prep.args.data))
    stop = GracefulStop()
    trainer = make_trainer(run, model, listener, stop)
    interrupted: Interrupted | None = None
    train_signals.hand_over()  # from here GracefulStop handles signals: finish the step, save, say how to resume
    try:
        with stop:
            result = trainer.fit(run.train_loader, run.val_loader, fit_epochs(prep, run.budget),
                                 set_epoch=run.epoch_sampler.set_epoch if run.epoch_sampler is not None else None)
    except Interrupted as exc:
        interrupted = exc.with_traceback(None)  # no frame cycle keeping the loaders' workers alive
        stopped = trainer.result
        assert stopped is not None  # fit() records its result before the first step, where a stop can come
        result = stopped
    except KeyboardInterrupt:  # a second Ctrl-C: stop at once (exit 130), say what is left
        if runlog is not None:
            runlog.close()
        good = f"the last good checkpoint is {trainer.last_good}; resume with: {resume_cmd}" \
            if trainer.last_good else "no checkpoint was written yet"
        print(f"fasttrain: interrupted: stopped at once, the step in flight is lost; {good}",
              file=sys.stderr, flush=True)
        raise
    except BaseException:
        if runlog is not None:
            runlog.close()
        raise
    finally:
        for loader in (run.train_loader, run.val_loader):
            if loader is not None:
                loader.shutdown()  # its workers ignore the signals the main process handles
    train_signals.after_training()  # a late SIGTERM must not cut the summary (commands/train ends this phase)
    summary = with_faults(run_summary(prep, result, run.run_dir, time.perf_counter() - run.started, torch),
                          trainer.faults(prep.plan.batch_size), prep)
    summary = replace(
        summary, precision=trainer.engine.precision.name,  # what ran: the precision A/B may have switched it
        forecast=ForecastFigures.from_json(run.forecast) if run.forecast is not None else None,
        resumed_clock=run.clock.report(),  # the time trained before the stop, and the stop's length
        plan_notes=tuple(plan_notes(prep)),  # every note of the opening, shown or not
        thread_changes=tuple(run.threads.changes) if run.threads is not None else ())
    if run.budget is not None:
        summary = replace(summary, time_budget=budget_report(run.budget, run.budget_source or "", summary.history,
                                                        prep.plan.scaled_lr))
    summary = replace(summary, verdict=final_verdict(prep, run.telemetry, summary.fit_s))
    if prep.is_main:  # the weights as a user loads them: model.safetensors + model.json (export.py)
        summary = write_model_files(prep, run.run_dir, summary)
    if interrupted is not None:
        summary = with_stop(summary, interrupted, resume_cmd if profile.checkpoint.save_last else None,
                            trainer.last_good)
    end = RunEnd(summary)
    if runlog is not None:
        RunLogListener(runlog).on_run_end(end)
        runlog.close()
    listener.on_run_end(end)
    return summary
