"""`fasttrain train` after the plan: build the model and loaders, train, report.

execute() runs what setup/prepare.py prepared: the tuning trial (when one is due), the model, the loaders,
the run folder and its log, telemetry, the step engine and the Trainer, with the command's display as a
TrainListener (events.py: the training code never imports the UI). A torchrun worker first joins the process
group (parallel/ddp.py) and trains its shard; only rank 0 draws, logs and writes checkpoints.
"""
from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from fasttrain.core.given import is_given
from fasttrain.train.events import DisplayFactory, Listeners, RunDisplay, RunEnd, RunLogListener, TrainListener
from fasttrain.train.run import opening
from fasttrain.train.run.export import checkpoint_policy, write_model_files
from fasttrain.train.run.run_clock import RunClock, resumed_clock
from fasttrain.train.run.summary import (
    budget_report,
    fault_report,
    final_verdict,
    interrupted_report,
    resume_command,
    run_summary,
)
from fasttrain.train.setup.plan_view import classes_text, must_know, opening_notes, plan_notes, weights_words
from fasttrain.train.state.run_state import RunExtras
from fasttrain.train.trial.tune import forecast_for_run
from fasttrain.train.types import Prepared

if TYPE_CHECKING:
    import torch

    from fasttrain.datasets.loaders import DecodedLoader, Loader
    from fasttrain.datasets.sampler import EpochSampler
    from fasttrain.telemetry.recorder import Telemetry
    from fasttrain.train.loop.budget import TimeBudget
    from fasttrain.train.loop.step import StepEngine
    from fasttrain.train.loop.trainer import Trainer
    from fasttrain.train.parallel.ddp import DistContext
    from fasttrain.train.run.opening import TrainLoader
    from fasttrain.train.run.runlog import RunLog
    from fasttrain.train.signals.lifecycle import GracefulStop


def execute(prep: Prepared, *, display: DisplayFactory | None = None, stream: TextIO | None = None,
            launched_at: float | None = None) -> dict[str, Any]:
    """Train; returns the summary (also written to summary.json). A torchrun worker joins its job first.
    `display`: the command's display (its dashboard), built from a RunDisplay once the loaders exist;
    None shows nothing. `launched_at`: time.time() the run's clock starts from (time to accuracy, the time
    budget); default: when this process (a torchrun worker: its launcher) started, so the command's own start-up
    counts."""
    from fasttrain.train.parallel import ddp
    launched = launched_at if launched_at is not None else opening.run_started_at(prep.world)
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


@dataclass
class _Run:
    """What one run trains with and writes to, beside the Trainer."""

    prep: Prepared
    train_loader: TrainLoader
    val_loader: Loader | DecodedLoader | None
    epoch_sampler: EpochSampler | None  # None for synthetic data (no order to keep)
    batches: int                        # loader batches in a whole epoch (before a resumed sampler shortens a pass)
    dist: DistContext | None            # in a torchrun worker
    run_dir: Path
    runlog: RunLog | None               # rank 0 only
    telemetry: Telemetry | None         # rank 0 only
    forecast: dict[str, Any] | None
    started: float                      # perf_counter() when training was about to start
    clock: RunClock                     # the run's clock: from this command's start, or a resumed one's
    tuning: dict[str, Any] = field(default_factory=dict)  # the tuning trial's findings (trial/tune.py)
    budget: TimeBudget | None = None    # --time-budget, --deadline or --max-cost
    budget_source: str | None = None    # which of them, in words
    first_step_s: float | None = None   # the forecast's seconds per loader batch (a budget's first plan)


def _execute(prep: Prepared, stream: TextIO | None, dist: DistContext | None, display: DisplayFactory,
             launched_at: float) -> dict[str, Any]:
    from fasttrain.models.registry import run_model
    from fasttrain.telemetry.recorder import Telemetry

    tuning: dict[str, Any] = {}
    tuned = dist is None and not prep.args.no_tune and not prep.tuning
    budget = opening.time_budget(prep, launched_at)
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
    opening.seed_everything(args.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
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
    run = _Run(prep, train_loader, val_loader, epoch_sampler, batches, dist, run_dir,
               runlog=opening.open_runlog(prep, run_dir) if main else None,
               telemetry=Telemetry(plan.device) if main else None,
               forecast=forecast if prep.shows_progress else None, started=time.perf_counter(),
               clock=resumed_clock(prep.resume, launched_at), tuning=tuning, budget=budget[0] if budget else None,
               budget_source=budget[1] if budget else None,
               first_step_s=(forecast or {}).get("step_time_s"))
    epochs = prep.resolved.profile.optim.epochs if budget is None else \
        _budget_epochs(budget[0], run.first_step_s, batches, plan.accumulation_steps, prep.resolved.profile.optim.epochs,
                       prep.resume.state.position.epoch if prep.resume is not None else 0)
    with display(RunDisplay(plan, total_batches=batches * epochs, epochs=epochs, stream=out, report=prep.report,
                            telemetry=run.telemetry, forecast=run.forecast, quiet=not prep.shows_progress,
                            plain=args.json, data_kind=prep.bundle.kind, measured=opening.measured_here(prep),
                            input_gain=opening.input_gain(prep) if main else None,
                            classes=classes_text(prep.bundle.num_classes, prep.bundle.class_names),
                            deadline=budget[0].deadline if budget else None)) as listener:
        listener.on_run_start(plan, opening_notes(prep, model))
        if words := weights_words(prep):  # where the starting weights come from (--weights' counts, the cache)
            listener.on_message(f"weights: {words}")
        if tuning and (args.verbose or "skipped" not in tuning):
            from fasttrain.train.trial.choice import tuning_line
            listener.on_message("tuning: " + tuning_line(tuning))
        summary = _train(run, model, listener)
    if "stop_message" in summary and main:  # a stop request ended the run: say where and how to resume
        print(summary["stop_message"], file=sys.stderr, flush=True)
    return summary


EPOCH_CAP = 100_000  # a budgeted run's epochs: the budget ends it, never this


def _budget_epochs(budget: TimeBudget, step_s: float | None, batches: int, accumulation: int, fallback: int,
                   start_epoch: int = 0) -> int:
    """The epochs a budget buys at the forecast's step time, for the display's progress (the run re-plans), after
    the `start_epoch` a resume continues from (a resumed run read `epoch 3/1`)."""
    from fasttrain.train.loop.budget import steps_that_fit
    if not step_s:
        return max(fallback, start_epoch + 1)
    steps = steps_that_fit(budget.training_left_s(), step_s * max(1, accumulation))
    return start_epoch + max(1, math.ceil(steps / max(1, math.ceil(batches / max(1, accumulation)))))


def _make_trainer(run: _Run, model: torch.nn.Module, listener: TrainListener, stop: GracefulStop) -> Trainer:
    """The step engine and the Trainer for this run, resumed from its checkpoint when there is one."""
    from fasttrain.datasets.transforms import make_mixup
    from fasttrain.train.events import Collaborators
    from fasttrain.train.loop.budget import BudgetPace
    from fasttrain.train.loop.step import StepEngine
    from fasttrain.train.loop.trainer import LoopOptions, Trainer

    prep, args, plan = run.prep, run.prep.args, run.prep.plan
    profile, bundle, sampler = prep.resolved.profile, prep.bundle, run.epoch_sampler
    saved_args, plan_dict, profile_dict = opening.args_to_save(args), plan.to_dict(), profile.model_dump(mode="json")

    def extras(consumed_batches: int) -> RunExtras:
        order = sampler.state_dict(consumed=consumed_batches * plan.batch_size) if sampler is not None else None
        used = run.budget.used_s() if run.budget is not None else None
        return RunExtras(plan_dict, saved_args, order, profile_dict, used, run.clock.now_s(), time.time())

    engine = StepEngine.build(plan, profile.optim, model, batches_per_epoch=run.batches,
                              activation_checkpointing=profile.speed.activation_checkpointing,
                              mixup=make_mixup(profile.optim, bundle.num_classes) if bundle.kind != "custom" else None,
                              dist=run.dist)
    accumulation = max(1, plan.accumulation_steps)
    steps_per_epoch = math.ceil(run.batches / accumulation)
    pace = BudgetPace(run.budget, engine.schedule, steps_per_epoch,
                      first_step_s=run.first_step_s * accumulation if run.first_step_s else None,
                      max_steps=args.epochs * steps_per_epoch if args.epochs else None, dist=run.dist,
                      reestimate_images=profile.optim.precise_bn_images) \
        if run.budget is not None else None
    options = LoopOptions(budget=pace, on_nan=args.on_nan, save_every_s=args.save_every_minutes * 60 if args.save_every_minutes
                          else None, patience=profile.optim.early_stopping_patience, extras=extras,
                          launched_at=run.clock.origin,
                          test_flip=profile.augment.validates_mirrored,
                          precise_bn_images=profile.optim.precise_bn_images,
                          before_step=_step_abs(run, engine, listener, steps_per_epoch))
    io_ = Collaborators(telemetry=run.telemetry, dashboard=listener, runlog=run.runlog, bad=bundle.bad,
                        checkpoints=checkpoint_policy(prep, run.run_dir) if prep.is_main else None)
    trainer = Trainer(engine, io=io_, options=options, stop=stop, dist=run.dist)
    if prep.resume is not None:
        trainer.restore(prep.resume)
        at = prep.resume.state.position
        listener.on_message(f"resumed from {prep.resume.path} at epoch {at.epoch + 1}, batch {at.batch}")
    for note in trainer.notes:
        if args.verbose or must_know(note):
            listener.on_message(f"note: {note}")
    return trainer


def _step_abs(run: _Run, engine: StepEngine, listener: TrainListener,
              steps_per_epoch: int) -> Callable[[int], None] | None:
    """The A/Bs the run's first steps make (compute threads, CPU precision), each only where wanted; none under DDP
    (the ranks would each pick their own)."""
    from fasttrain.train.trial import precision_ab, thread_ab
    from fasttrain.train.trial.step_ab import in_turn

    if run.dist is not None:
        return None
    planned = None if run.budget is not None else run.prep.resolved.profile.optim.epochs * steps_per_epoch
    return in_turn(thread_ab.hook(run.prep, run.tuning, listener.on_message),
                   precision_ab.hook(run.prep, run.tuning, engine.precision, listener.on_message,
                                     planned_steps=planned))


def _train(run: _Run, model: torch.nn.Module, listener: TrainListener) -> dict[str, Any]:
    """Fit; -> the summary, also told to the run log and the display. A stop request ends in a summary too."""
    import torch

    from fasttrain.train.loop.outcome import Interrupted
    from fasttrain.train.signals.lifecycle import GracefulStop, train_signals

    prep, runlog = run.prep, run.runlog
    profile = prep.resolved.profile
    resume_cmd = resume_command(run.run_dir, profile.world.nodes, profile.world.gpus_per_node,
                                python=is_given(prep.model_name) or is_given(prep.args.data))
    stop = GracefulStop()
    trainer = _make_trainer(run, model, listener, stop)
    interrupted: Interrupted | None = None
    train_signals.hand_over()  # from here GracefulStop handles signals: finish the step, save, say how to resume
    try:
        with stop:
            result = trainer.fit(run.train_loader, run.val_loader,
                                 profile.optim.epochs if run.budget is None else prep.args.epochs or EPOCH_CAP,
                                 set_epoch=run.epoch_sampler.set_epoch if run.epoch_sampler is not None else None)
    except Interrupted as exc:
        interrupted = exc.with_traceback(None)  # no frame cycle keeping the loaders' workers alive
        result = trainer.result
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
    summary = run_summary(prep, result, run.run_dir, time.perf_counter() - run.started, torch)
    summary["precision"] = trainer.engine.precision.name  # what ran: the precision A/B may have switched it
    summary.update(fault_report(trainer.faults(prep.plan.batch_size), prep))
    summary["forecast"] = run.forecast
    summary["resumed_clock"] = run.clock.report()  # the time trained before the stop, and the stop's length
    if run.budget is not None:
        summary["time_budget"] = budget_report(run.budget, run.budget_source or "", summary.get("history") or [],
                                               prep.plan.scaled_lr)
    summary["plan_notes"] = plan_notes(prep)  # every note of the opening, shown or not
    summary["verdict"] = final_verdict(prep, run.telemetry, summary.get("fit_s"))
    if prep.is_main:  # the weights as a user loads them: model.safetensors + model.json (export.py)
        summary["model_files"] = write_model_files(prep, run.run_dir, summary)
    if interrupted is not None:
        summary.update(interrupted_report(interrupted, resume_cmd if profile.checkpoint.save_last else None,
                                          trainer.last_good))
    end = RunEnd(summary)
    if runlog is not None:
        RunLogListener(runlog).on_run_end(end)
        runlog.close()
    listener.on_run_end(end)
    return summary
