"""`fasttrain train` after the plan: build the model and loaders, train, report.

execute() runs what prepare.py prepared: the model, the loaders (a sampler that can resume mid-epoch), the
run folder and its log, telemetry, and the Trainer, with the command's display as a TrainListener (events.py:
the training code never imports the UI). A torchrun worker first joins the process group (distributed.py) and
trains its shard; only rank 0 draws, logs and writes checkpoints.
"""
from __future__ import annotations

import contextlib
import io
import json
import random
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from fasttrain.train.events import DisplayFactory, Listeners, RunDisplay, RunEnd, RunLogListener, TrainListener
from fasttrain.train.setup.prepare import DEFAULT_MODELS, RESUMED_FIELDS, Prepared, TrainArgs, plan_notes
from fasttrain.train.run.summary import fault_report, highlights, interrupted_report, resume_command, run_summary
from fasttrain.train.trial.tune import forecast_for_run


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def execute(prep: Prepared, *, display: DisplayFactory | None = None, stream: Any = None) -> dict[str, Any]:
    """Train; returns the summary (also written to summary.json). A torchrun worker joins its job first.
    `display`: the command's display (its dashboard), built from a RunDisplay once the loaders exist;
    None shows nothing."""
    from fasttrain.train.parallel import ddp as distributed
    with distributed.joined(prep.world, prep.plan.device) as dist:
        return _execute(prep, stream, dist, display or _no_display)


@contextlib.contextmanager
def _no_display(spec: RunDisplay) -> Iterator[TrainListener]:
    yield Listeners()


@dataclass
class _Run:
    """What one run trains with and writes to, beside the Trainer."""

    prep: Prepared
    train_loader: Any
    val_loader: Any
    epoch_sampler: Any          # datasets.sampler.EpochSampler; None for synthetic data (no order to keep)
    batches: int                # loader batches in a whole epoch (before a resumed sampler shortens a pass)
    dist: Any                   # distributed.DistContext in a torchrun worker, else None
    run_dir: Path
    runlog: Any                 # runlog.RunLog on rank 0, else None
    telemetry: Any              # telemetry.recorder.Telemetry on rank 0, else None
    forecast: dict[str, Any] | None
    started: float              # perf_counter() when training was about to start
    tuning: dict[str, Any] = field(default_factory=dict)  # the tuning trial's findings (train/trial/tune.py)


def _execute(prep: Prepared, stream: Any, dist: Any, display: DisplayFactory) -> dict[str, Any]:
    from fasttrain.models.registry import create_model
    from fasttrain.telemetry.recorder import Telemetry

    tuning: dict[str, Any] = {}
    shown = not (prep.args.quiet or not prep.is_main)
    tuned = dist is None and not prep.args.no_tune and not getattr(prep, "tuning", None)
    # The forecast is shown beside the run, and its step time tells the trial whether it can afford anything.
    forecast = forecast_for_run(prep) if (shown or tuned) and prep.bundle.kind != "custom" else None
    if dist is None:  # before the seed: the trial's models do not move the run's random numbers
        from fasttrain.train.trial.tune import tune_prepared
        prep, tuning = tune_prepared(prep, (forecast or {}).get("step_time_s"))
    args, plan, main = prep.args, prep.plan, prep.is_main
    # Ranks other than 0 draw nothing and write nothing: their display talks to a sink.
    stream = (stream if stream is not None else (sys.stderr if args.json else sys.stdout)) if main else io.StringIO()
    seed_everything(args.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = create_model(prep.model_name, prep.bundle.num_classes, pretrained=args.pretrained,
                         image_size=prep.plan.image_size)
    train_loader, val_loader, epoch_sampler, batches = _open_data(prep, dist)
    run_dir = _run_dir(prep, dist)
    if main and tuning:
        from fasttrain.core.files import write_text_atomic
        write_text_atomic(run_dir / "tuning.json", json.dumps(tuning, indent=1, default=str))
    quiet = args.quiet or not main
    run = _Run(prep, train_loader, val_loader, epoch_sampler, batches, dist, run_dir,
               runlog=_open_runlog(prep, run_dir) if main else None,
               telemetry=Telemetry(plan.device) if main else None,
               forecast=forecast if shown else None,
               started=time.perf_counter(), tuning=tuning)
    epochs = prep.resolved.profile.optim.epochs
    with display(RunDisplay(plan, total_batches=batches * epochs, epochs=epochs, stream=stream, report=prep.report,
                            telemetry=run.telemetry, forecast=run.forecast, quiet=quiet, plain=args.json,
                            data_kind=prep.bundle.kind, measured=_measured(prep),
                            input_gain=_input_gain(prep) if main else None)) as listener:
        listener.on_run_start(plan, plan_notes(prep))
        if tuning:
            from fasttrain.train.trial.tune import tuning_line
            listener.on_message("tuning: " + tuning_line(tuning))
        summary = _train(run, model, listener)
    if "stop_message" in summary and main:  # a stop request ended the run: say where and how to resume
        print(summary["stop_message"], file=sys.stderr, flush=True)
    return summary


def _measured(prep: Prepared) -> tuple[Any, ...]:
    """What was measured on this machine with this torch and model (tuning trials, bench speedups)."""
    from fasttrain.tuning.store import load_cache, machine_id, machine_measurements
    try:
        entries = load_cache()
    except Exception:  # noqa: BLE001 - no cache directory: nothing measured
        return ()
    return tuple(machine_measurements(entries, machine_id(prep.report), prep.report.torch.version, prep.model_name))


def _input_gain(prep: Any) -> str | None:
    """For the input-bound verdict: "" on prepared shards, else the factor `bench loader` measured on this
    folder (or that it is unmeasured); None for other data."""
    from pathlib import Path

    from fasttrain.datasets.measured import find_path_gains, gain_sentence
    from fasttrain.datasets.shards import ShardImages

    if prep.bundle.kind != "images":
        return None
    if isinstance(prep.bundle.train, ShardImages):
        return ""
    source = prep.bundle.source
    gains = find_path_gains(source, Path(prep.args.runs_dir)) or find_path_gains(source)  # bench's default runs/
    return gain_sentence(gains, source)


def _open_data(prep: Prepared, dist: Any) -> tuple[Any, Any, Any, int]:
    """-> (train loader, validation loader or None, epoch sampler or None, batches in a whole epoch)."""
    from fasttrain.datasets.build import SyntheticBatches
    from fasttrain.train.signals.resilience import quiet_workers
    from fasttrain.train.state.resume import restore_sampler

    args, plan, bundle = prep.args, prep.plan, prep.bundle
    rank, world = (dist.rank, dist.size) if dist is not None else (0, 1)
    if bundle.kind == "synthetic":
        device = dist.device if dist is not None else plan.device
        train_loader = SyntheticBatches(plan.batch_size, plan.image_size, bundle.num_classes, device,
                                        steps=plan.iterations_per_epoch or 1, seed=args.seed + rank)
        return train_loader, None, None, len(train_loader)
    from fasttrain.datasets.loaders import build_loaders
    from fasttrain.datasets.sampler import EpochSampler
    epoch_sampler = EpochSampler(bundle.train_size, seed=args.seed, shuffle=True, rank=rank, world=world,
                                 drop_last=plan.drop_last)
    train_loader, val_loader = build_loaders(bundle, plan, seed=args.seed, epoch_sampler=epoch_sampler)
    for loader in (train_loader, val_loader):
        quiet_workers(loader)  # workers get Ctrl-C too (one process group): the main process stops them
    batches = len(train_loader)  # a whole epoch's, before a resumed sampler shortens the first pass
    if prep.resume_payload is not None:
        restore_sampler(epoch_sampler, prep.resume_payload, prep.resume_path)  # type: ignore[arg-type]
    return train_loader, val_loader, epoch_sampler, batches


def _run_dir(prep: Prepared, dist: Any) -> Path:
    """The run folder: rank 0 makes it (a new name, or the resumed run's) and tells the other ranks."""
    from fasttrain.train.run.runlog import new_run_dir

    args = prep.args
    run_dir = new_run_dir(args.runs_dir, args.run_name, profile=prep.profile_ref.replace("/", "_").removesuffix(".yaml"),
                          resume=prep.resume_payload is not None) if prep.is_main else None
    if dist is not None:
        run_dir = dist.broadcast(run_dir)
    return run_dir  # type: ignore[return-value]


def _open_runlog(prep: Prepared, run_dir: Path) -> Any:
    from fasttrain.train.state.resume import log_cut
    from fasttrain.train.run.runlog import RunLog

    runlog = RunLog(run_dir, resume_at=log_cut(prep.resume_payload))  # locks the folder; cuts rows past the checkpoint
    runlog.write_profile(prep.resolved.profile.model_dump(mode="json"),
                         header=f"resolved profile of this run; sources: {' < '.join(prep.resolved.chain)}")
    return runlog


def _make_trainer(run: _Run, model: Any, listener: TrainListener, stop: Any) -> Any:
    """The Trainer for this run, resumed from its checkpoint when there is one; tells the display so."""
    from fasttrain.datasets.transforms import make_mixup
    from fasttrain.train.state.checkpoint import CheckpointPolicy
    from fasttrain.train.events import Collaborators
    from fasttrain.train.loop.trainer import Trainer

    prep, args, plan = run.prep, run.prep.args, run.prep.plan
    profile, bundle = prep.resolved.profile, prep.bundle
    saved_args = _args_to_save(args)

    def extra_state(consumed_batches: int) -> dict[str, Any]:
        state: dict[str, Any] = {"args": saved_args}
        if run.epoch_sampler is not None:
            state["sampler"] = run.epoch_sampler.state_dict(consumed=consumed_batches * plan.batch_size)
        return state
    mixup = make_mixup(profile.optim, bundle.num_classes) if bundle.kind != "custom" else None
    checkpoints = CheckpointPolicy(run.run_dir, args.save_every) if prep.is_main else None
    trainer = Trainer(plan, profile.optim, model, steps_per_epoch=run.batches,
                      activation_checkpointing=profile.speed.activation_checkpointing, mixup=mixup, profile=profile,
                      collaborators=Collaborators(telemetry=run.telemetry, dashboard=listener, runlog=run.runlog,
                                                  checkpoints=checkpoints, bad_files=bundle.bad_files),
                      extra_state=extra_state, on_nan=args.on_nan, stop=stop,
                      save_every_s=args.save_every_minutes * 60 if args.save_every_minutes else None, dist=run.dist)
    if prep.resume_payload is not None:
        trainer.load_state(prep.resume_payload, prep.resume_path)  # type: ignore[arg-type]
        p = prep.resume_payload
        listener.on_message(f"resumed from {prep.resume_path} at epoch {p['epoch'] + 1}, batch {p['batch_in_epoch']}")
    for note in trainer.notes:
        listener.on_message(f"note: {note}")
    return trainer


def _train(run: _Run, model: Any, listener: TrainListener) -> dict[str, Any]:
    """Fit; -> the summary, also told to the run log and the display. A stop request ends in a summary too."""
    import torch

    from fasttrain.train.loop.outcome import Interrupted
    from fasttrain.train.signals.resilience import GracefulStop, shutdown_workers

    prep, runlog = run.prep, run.runlog
    profile = prep.resolved.profile
    resume_cmd = resume_command(run.run_dir, profile.world.nodes, profile.world.gpus_per_node)
    stop = GracefulStop()
    trainer = _make_trainer(run, model, listener, stop)
    if run.dist is None:
        from fasttrain.train.trial import thread_ab
        thread_ab.attach(trainer, prep, run.tuning, listener.on_message)
    interrupted: Any = None
    from fasttrain.train.signals import before_training as early_stop
    early_stop.disarm()  # from here the GracefulStop handles signals: finish the step, save, say how to resume
    try:
        with stop:
            result = trainer.fit(run.train_loader, run.val_loader, profile.optim.epochs,
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
                shutdown_workers(loader)
    early_stop.hold_after_run()  # training is over: a late SIGTERM must not cut the summary (commands/train releases)
    summary = run_summary(prep, result, run.run_dir, time.perf_counter() - run.started, torch)
    summary.update(fault_report(trainer, prep, prep.bundle))
    summary["forecast"] = run.forecast
    if interrupted is not None:
        summary.update(interrupted_report(interrupted, resume_cmd, trainer))
    end = RunEnd(summary, highlights(summary))
    if runlog is not None:
        RunLogListener(runlog).on_run_end(end)
        runlog.close()
    listener.on_run_end(end)
    return summary


def _args_to_save(args: TrainArgs) -> dict[str, Any]:
    """The run's own arguments for a later --resume; a profile file or data folder given by a relative
    path is stored absolute, so the resume works from any directory."""
    saved = {k: v for k, v in asdict(args).items() if k in RESUMED_FIELDS}
    profile, data = saved.get("profile"), saved.get("data")
    if isinstance(profile, str) and profile.endswith((".yaml", ".yml")) and Path(profile).is_file():
        saved["profile"] = str(Path(profile).resolve())
    if isinstance(data, str) and data not in DEFAULT_MODELS and ":" not in data and Path(data).is_dir():
        saved["data"] = str(Path(data).resolve())
    return saved


