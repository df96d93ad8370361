"""`fasttrain train` behind the command line: gather -> plan -> run, returning plain data to render.

gather: resolve the profile (flags > --set > env > file), probe the machine, open the data, build the model.
compute: make_plan() (pure, plan.py). run: the Trainer with telemetry, dashboard and run log.
--resume: the checkpoint's own arguments (model, data, profile, seed, ...) fill every flag not given again,
so `fasttrain train --resume runs/NAME` alone continues the same run (resume.py finds the checkpoint).
Data-parallel (issue 8): the process given --nproc-per-node checks everything here, then launch.py starts the
workers through torch.distributed.run; a worker (torchrun's environment) takes its world size from it, joins
the process group (distributed.py) and trains its shard; only rank 0 draws, logs and writes checkpoints.
Imported lazily by commands/train.py, so torch is imported only when a training actually starts.
"""
from __future__ import annotations

import contextlib
import random
import shlex
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from fasttrain.profiles import presets
from fasttrain.core.errors import Problem, UserError
from fasttrain.train.batch_search import check_batch_option
from fasttrain.train.launch import LaunchSpec, WorkerWorld, check_spec, world_flags, worker_world
from fasttrain.plan import Plan, make_plan
from fasttrain.train.events import DisplayFactory, Listeners, RunDisplay, RunEnd, RunLogListener, TrainListener
from fasttrain.profiles.presets import Resolved
from fasttrain.hardware.report import HardwareReport

# Model used when --model is not given, by kind of data.
DEFAULT_MODELS = {"shapes": "tiny_cnn", "synthetic": "tiny_cnn", "images": "resnet18"}


@dataclass(frozen=True)
class TrainArgs:
    """The command line as given; final_args() makes the values a run trains with (a new TrainArgs)."""

    profile: str | None = None
    model: str | None = None
    data: str = "shapes"
    epochs: int | None = None
    sets: list[str] = field(default_factory=list)
    run_name: str | None = None
    runs_dir: Path = Path("runs")
    dry_run: bool = False
    pretrained: bool = False
    seed: int = 0
    quiet: bool = False
    json: bool = False
    image_size: int | None = None
    num_classes: int | None = None
    save_every: int | None = None
    strict_data: bool = False
    resume: str | None = None            # a run folder, a checkpoint file, or "auto"
    on_nan: str = "stop"                 # "stop" | "skip"
    save_every_minutes: float | None = None
    batch_size: str | None = None        # a number, or "auto" (batch_search: the largest that fits here)
    launch: LaunchSpec | None = None     # --nproc-per-node ...: this process starts the workers
    explicit: set[str] = field(default_factory=set)  # fields given on the command line (win over a checkpoint's)


# TrainArgs fields a checkpoint keeps, so a resume without them repeats the original run.
RESUMED_FIELDS = ("profile", "model", "data", "epochs", "sets", "pretrained", "seed", "image_size", "num_classes",
                  "save_every", "strict_data", "on_nan", "save_every_minutes", "batch_size")


@dataclass
class Prepared:
    args: TrainArgs
    resolved: Resolved
    report: HardwareReport
    plan: Plan
    bundle: Any
    model_name: str
    profile_ref: str
    profile_reason: str
    resume_path: Path | None = None
    resume_payload: dict[str, Any] | None = None
    world: WorkerWorld | None = None     # set in a torchrun worker

    @property
    def is_main(self) -> bool:
        return self.world is None or self.world.is_main


def probe() -> HardwareReport:
    from fasttrain.hardware.probe import probe as hardware_probe
    return hardware_probe()


def choose_profile(args: TrainArgs, report: HardwareReport) -> tuple[str, str]:
    if args.profile:
        return args.profile, "--profile"
    from fasttrain.profiles.recommend import best_preset
    name = best_preset(report)
    return name, "fits this machine (fasttrain.profiles.recommend.best_preset)"


def flag_overrides(args: TrainArgs, world: WorkerWorld | None = None) -> dict[str, tuple[str, Any]]:
    """Flags that set profile values, for presets.resolve; `--batch-size N` among them (auto is searched)."""
    flags: dict[str, tuple[str, Any]] = {}
    if world is not None:  # a torchrun worker: the job's shape is what the agent started
        flags.update(world_flags(world.local_world_size, world.nodes, source="torchrun"))
    elif args.launch is not None:
        flags.update(world_flags(args.launch.nproc_per_node, args.launch.nnodes))
    if args.epochs is not None:
        flags["optim.epochs"] = ("--epochs", args.epochs)
    if args.image_size is not None:
        flags["loader.image_size"] = ("--image-size", args.image_size)
    if args.batch_size is not None:
        batch = check_batch_option(args.batch_size)
        if batch is not None:
            flags["loader.batch_size"] = ("--batch-size", batch)
    return flags


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def final_args(args: TrainArgs, world: WorkerWorld | None) -> tuple[TrainArgs, Path | None, dict[str, Any] | None]:
    """The arguments this run trains with -> (args, checkpoint to resume or None, its payload or None).
    A resume takes every flag not given again from the checkpoint and trains in the checkpoint's folder; a
    torchrun worker drops the launch flags (torchrun already launched it). Bad values raise UserError."""
    resume_path, payload = None, None
    if args.resume:
        from fasttrain.train.resume import find_checkpoint, with_saved_args
        resume_path, payload, skipped = find_checkpoint(args.resume, args.runs_dir, args.run_name)
        args = replace(with_saved_args(args, payload, RESUMED_FIELDS),
                       runs_dir=resume_path.parent.parent, run_name=resume_path.parent.name)
        for bad in skipped:
            print(f"fasttrain: note: skipped damaged checkpoint {bad}", file=sys.stderr)
    _check_values(args)
    if args.launch is not None:
        _check_launch(args.launch, world)
        if world is not None:  # `torchrun ... -m fasttrain train --nproc-per-node N`: torchrun already launched
            args = replace(args, launch=None)
    return args, resume_path, payload


def _check_values(args: TrainArgs) -> None:
    for flag, value in (("--epochs", args.epochs), ("--image-size", args.image_size),
                        ("--num-classes", args.num_classes), ("--save-every", args.save_every)):
        if value is not None and value < 1:
            raise UserError([Problem(flag, "must be at least 1", value=value)])
    if args.save_every_minutes is not None and args.save_every_minutes <= 0:
        raise UserError([Problem("--save-every-minutes", "must be positive", value=args.save_every_minutes)])
    from fasttrain.train.resilience import ON_NAN_MODES
    if args.on_nan not in ON_NAN_MODES:
        raise UserError([Problem("--on-nan", f"must be one of {', '.join(ON_NAN_MODES)}", value=args.on_nan)])


def prepare(given: TrainArgs) -> Prepared:
    """Everything up to the plan; every bad input raises UserError before any training starts."""
    world = worker_world()
    args, resume_path, payload = final_args(given, world)
    report = probe()
    ref, reason = choose_profile(args, report)
    resolved = presets.resolve(ref, sets=args.sets, flags=flag_overrides(args, world))
    from fasttrain.datasets.build import build_datasets
    bundle = build_datasets(args.data, image_size=resolved.profile.loader.image_size, augment=resolved.profile.augment,
                            seed=args.seed, strict=args.strict_data, num_classes=args.num_classes)
    if args.num_classes is not None and bundle.kind == "images" and args.num_classes != bundle.num_classes:
        raise UserError([Problem("--num-classes", f"the data has {bundle.num_classes} class folders",
                                 "drop --num-classes for image folders", args.num_classes)])
    model_name = args.model or _default_model(args.data, bundle.kind)
    notes: list[str] = []
    if args.batch_size is not None and check_batch_option(args.batch_size) is None:  # auto: search, then resolve
        resolved, auto_note = _auto_batch(args, ref, resolved, report, model_name, bundle.num_classes, world)
        notes.append(auto_note)
    profile = resolved.profile
    plan = _make_plan(profile, report, bundle.train_size, notes)
    _check_world(plan, profile, report, launched=world is not None or args.launch is not None)
    if plan.iterations_per_epoch == 0:
        raise UserError([Problem("loader.batch_size", f"larger than the {bundle.train_size} training samples, "
                                 "so an epoch has no full batch", "lower it with --set loader.batch_size=N",
                                 plan.batch_size)])
    if payload is not None:
        from fasttrain.train.resume import check_resumable
        check_resumable(payload, resume_path, plan, profile.optim.epochs)  # type: ignore[arg-type]
    return Prepared(args, resolved, report, plan, bundle, model_name, ref, reason, resume_path, payload, world)


def _make_plan(profile: Any, report: HardwareReport, dataset_size: int, notes: list[str]) -> Plan:
    """make_plan, with the run's own notes (an auto batch's explanation) after the plan's."""
    plan = make_plan(profile, report, dataset_size=dataset_size)
    return replace(plan, notes=[*plan.notes, *notes]) if notes else plan


def _check_launch(spec: LaunchSpec, world: WorkerWorld | None) -> None:
    check_spec(spec)
    if world is not None and (spec.nproc_per_node, spec.nnodes) != (world.local_world_size, world.nodes):
        raise UserError([Problem("--nproc-per-node", f"this process is a torchrun worker of a job of {world.nodes} "
                                 f"node(s) x {world.local_world_size} processes, not {spec.nnodes} x "
                                 f"{spec.nproc_per_node}", "drop the launch flags under torchrun",
                                 spec.nproc_per_node)])


def _check_world(plan: Plan, profile: Any, report: HardwareReport, *, launched: bool) -> None:
    """A world the machine cannot serve stops here, before any process starts."""
    per_node = profile.world.gpus_per_node
    if plan.world_size > 1 and not launched:  # the effective batch and LR would assume devices that are not training
        nodes = f" --nnodes {profile.world.nodes} --node-rank R --rdzv-endpoint HOST:PORT" \
            if profile.world.nodes > 1 else ""
        raise UserError([Problem("world", f"the profile asks for {plan.world_size} processes ({profile.world.nodes} "
                                 f"node(s) x {per_node}), started by one command per machine",
                                 f"add --nproc-per-node {per_node}{nodes} (or run under torchrun), or set "
                                 "--set world.nodes=1 --set world.gpus_per_node=1", plan.world_size)])
    if plan.device == "cuda" and per_node > report.torch.device_count:
        raise UserError([Problem("--nproc-per-node", f"{per_node} processes per node, but torch sees "
                                 f"{report.torch.device_count} GPU(s) here: DDP runs one process per GPU",
                                 f"use --nproc-per-node {report.torch.device_count} or fewer", per_node)])
    if plan.device == "cpu" and per_node > report.cores:
        raise UserError([Problem("--nproc-per-node", f"{per_node} CPU processes on {report.cores} cores: each would "
                                 "get less than a core", f"use --nproc-per-node {report.cores} or fewer", per_node)])


def _auto_batch(args: TrainArgs, ref: str, resolved: Resolved, report: HardwareReport, model_name: str,
                num_classes: int, world: WorkerWorld | None) -> tuple[Resolved, str]:
    """--batch-size auto: the search on this machine (cached), applied as flags -> (re-resolved profile, its
    explanation). The search plans the profile as resolved without it; the final plan is made from the result."""
    from fasttrain.train import batch_search
    profile = resolved.profile
    batch, accumulation, message = batch_search.resolve_auto_batch(
        make_plan(profile, report), model_name, profile.loader.image_size, num_classes=num_classes,
        optim=profile.optim, activation_checkpointing=profile.speed.activation_checkpointing)
    flags = {**flag_overrides(args, world), **batch_search.auto_flags(batch, accumulation)}
    return presets.resolve(ref, sets=args.sets, flags=flags), message


def _default_model(spec: str, kind: str) -> str:
    if spec in DEFAULT_MODELS:
        return DEFAULT_MODELS[spec]
    if kind == "custom":
        raise UserError([Problem("--model", "required with --data module:callable",
                                 "name a timm/torchvision model or give module:callable for your own")])
    return DEFAULT_MODELS["images"]


def plan_view(prep: Prepared) -> dict[str, Any]:
    """What --dry-run shows (and --json prints): the plan, where the profile came from, data and model."""
    p = prep.plan
    return {
        "profile": prep.profile_ref, "profile_reason": prep.profile_reason, "sources": prep.resolved.chain,
        "model": prep.model_name,
        "data": {"spec": prep.args.data, "kind": prep.bundle.kind, "source": str(prep.bundle.source),
                 "num_classes": prep.bundle.num_classes, "train_size": prep.bundle.train_size,
                 "val_size": getattr(prep.bundle, "val_size", 0)},
        "epochs": prep.resolved.profile.optim.epochs,
        "optimizer": prep.resolved.profile.optim.optimizer, "schedule": prep.resolved.profile.optim.schedule,
        "plan": p.to_dict(),
        "notes": [n.line() for n in prep.resolved.notes] + list(p.notes),
    }


def plan_lines(view: dict[str, Any]) -> list[str]:
    p = view["plan"]
    d = view["data"]
    lines = [
        f"profile      {view['profile']} ({view['profile_reason']})",
        f"device       {p['device']}: {p['device_reason']}",
        f"precision    {p['precision']} (asked {p['precision_requested']}: {p['precision_reason']})",
        f"compile      {'on, mode ' + p['compile_mode'] if p['compile'] else 'off'} ({p['compile_reason']})",
        f"speed        channels_last={p['channels_last']} tf32={p['tf32']} cudnn_benchmark={p['cudnn_benchmark']} "
        f"fused_optimizer={p['fused_optimizer']}",
        f"batch        {p['batch_size']} per device x {p['accumulation_steps']} accumulation x {p['world_size']} "
        f"devices = effective batch {p['effective_batch']}",
        f"LR           {view['optimizer']} {p['base_lr']:g} @ base batch -> scaled LR {p['scaled_lr']:.4g}, "
        f"schedule {view['schedule']}",
        f"workers      {p['workers']} (asked {p['workers_requested']}: {p['workers_reason']}), "
        f"prefetch {p['prefetch_factor']}, pin_memory={p['pin_memory']}",
        f"data         {d['spec']} ({d['kind']}): {d['train_size']} train / {d['val_size']} val, "
        f"{d['num_classes']} classes, {p['image_size']} px",
        f"iterations   {p['iterations_per_epoch']} per epoch x {view['epochs']} epochs",
        f"model        {view['model']}",
    ]
    lines += [f"note         {n}" for n in view["notes"]]
    return lines


def execute(prep: Prepared, *, display: DisplayFactory | None = None, stream: Any = None) -> dict[str, Any]:
    """Train; returns the summary (also written to summary.json). A torchrun worker joins its job first.
    `display`: the command's display (its dashboard), built from a RunDisplay once the loaders exist;
    None shows nothing."""
    from fasttrain.train import distributed
    with distributed.joined(prep.world, prep.plan.device) as dist:
        return _execute(prep, stream, dist, display or _no_display)


@contextlib.contextmanager
def _no_display(spec: RunDisplay) -> Iterator[TrainListener]:
    yield Listeners()


def _execute(prep: Prepared, stream: Any, dist: Any, display: DisplayFactory) -> dict[str, Any]:
    import io

    import torch

    from fasttrain.train.checkpoint import CheckpointPolicy
    from fasttrain.datasets.build import SyntheticBatches
    from fasttrain.models.registry import create_model
    from fasttrain.train.resilience import GracefulStop, quiet_workers, shutdown_workers
    from fasttrain.train.resume import restore_sampler
    from fasttrain.train.runlog import RunLog, new_run_dir
    from fasttrain.telemetry.recorder import Telemetry
    from fasttrain.train.loop import Collaborators, Interrupted, Trainer

    args, plan, bundle, profile = prep.args, prep.plan, prep.bundle, prep.resolved.profile
    main = prep.is_main
    rank, world = (dist.rank, dist.size) if dist is not None else (0, 1)
    # Ranks other than 0 draw nothing and write nothing: their dashboard talks to a sink.
    stream = (stream if stream is not None else (sys.stderr if args.json else sys.stdout)) if main else io.StringIO()
    seed_everything(args.seed)  # the same initial weights on every rank (DDP also broadcasts rank 0's)
    model = create_model(prep.model_name, bundle.num_classes, pretrained=args.pretrained)
    epochs = profile.optim.epochs
    device = dist.device if dist is not None else plan.device
    epoch_sampler, train_loader, val_loader = None, None, None
    if bundle.kind == "synthetic":
        train_loader = SyntheticBatches(plan.batch_size, plan.image_size, bundle.num_classes, device,
                                        steps=plan.iterations_per_epoch or 1, seed=args.seed + rank)
    else:
        from fasttrain.datasets.loaders import build_loaders
        from fasttrain.datasets.sampler import EpochSampler
        epoch_sampler = EpochSampler(bundle.train_size, seed=args.seed, shuffle=True, rank=rank, world=world,
                                     drop_last=plan.drop_last)
        train_loader, val_loader = build_loaders(bundle, plan, seed=args.seed, epoch_sampler=epoch_sampler)
        for loader in (train_loader, val_loader):
            quiet_workers(loader)  # workers get Ctrl-C too (one process group): the main process stops them
    batches = len(train_loader)  # a whole epoch's, before a resumed sampler shortens the first pass
    if prep.resume_payload is not None and epoch_sampler is not None:
        restore_sampler(epoch_sampler, prep.resume_payload, prep.resume_path)  # type: ignore[arg-type]
    run_dir = new_run_dir(args.runs_dir, args.run_name, profile=prep.profile_ref.replace("/", "_").removesuffix(".yaml"),
                          resume=prep.resume_payload is not None) if main else None
    if dist is not None:
        run_dir = dist.broadcast(run_dir)
    resume_cmd = resume_command(run_dir, profile.world.nodes, profile.world.gpus_per_node)
    saved_args = _args_to_save(args)

    def extra_state(consumed_batches: int) -> dict[str, Any]:
        state: dict[str, Any] = {"args": saved_args}
        if epoch_sampler is not None:
            state["sampler"] = epoch_sampler.state_dict(consumed=consumed_batches * plan.batch_size)
        return state
    runlog = RunLog(run_dir) if main else None
    if runlog is not None:
        runlog.write_profile(profile.model_dump(mode="json"),
                             header=f"resolved profile of this run; sources: {' < '.join(prep.resolved.chain)}")
    quiet = args.quiet or not main
    telemetry = Telemetry(plan.device) if main else None
    from fasttrain.datasets.transforms import make_mixup
    mixup = make_mixup(profile.optim, bundle.num_classes) if bundle.kind != "custom" else None
    warnings: list[str] = []
    forecast = forecast_for_run(prep) if not quiet and bundle.kind != "custom" else None
    started = time.perf_counter()
    interrupted: Any = None
    with display(RunDisplay(plan, total_batches=batches * epochs, epochs=epochs, stream=stream, report=prep.report,
                            telemetry=telemetry, forecast=forecast, quiet=quiet, plain=args.json)) as listener:
        listener.on_run_start(plan, plan_view(prep)["notes"])
        stop = GracefulStop()
        trainer = Trainer(plan, profile.optim, model, steps_per_epoch=batches,
                          activation_checkpointing=profile.speed.activation_checkpointing, mixup=mixup,
                          profile=profile,
                          collaborators=Collaborators(telemetry=telemetry, dashboard=listener, runlog=runlog,
                                                      checkpoints=CheckpointPolicy(run_dir, args.save_every)
                                                      if main else None,
                                                      warn=warnings.append, bad_files=bundle.bad_files),
                          extra_state=extra_state, on_nan=args.on_nan, stop=stop,
                          save_every_s=args.save_every_minutes * 60 if args.save_every_minutes else None, dist=dist)
        if prep.resume_payload is not None:
            trainer.load_state(prep.resume_payload, prep.resume_path)  # type: ignore[arg-type]
            p = prep.resume_payload
            listener.on_message(f"resumed from {prep.resume_path} at epoch {p['epoch'] + 1}, batch {p['batch_in_epoch']}")
        for note in trainer.notes:
            listener.on_message(f"note: {note}")
        try:
            with stop:
                result = trainer.fit(train_loader, val_loader, epochs,
                                     set_epoch=epoch_sampler.set_epoch if epoch_sampler is not None else None)
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
            for loader in (train_loader, val_loader):
                if loader is not None:
                    shutdown_workers(loader)
        summary = _summary(prep, result, run_dir, time.perf_counter() - started, bundle, torch)
        summary.update(_faults(trainer, prep, bundle))
        summary["forecast"] = forecast
        if interrupted is not None:
            summary.update(_interrupted(interrupted, resume_cmd, trainer))
        end = RunEnd(summary, _short(summary))
        if runlog is not None:
            RunLogListener(runlog).on_run_end(end)
            runlog.close()
        listener.on_run_end(end)
    if interrupted is not None and main:
        print(summary["stop_message"], file=sys.stderr, flush=True)
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


def resume_command(run_dir: Path, nodes: int = 1, per_node: int = 1) -> str:
    """The command that continues this run; a data-parallel run needs its processes again (same world size)."""
    command = f"fasttrain train --resume {shlex.quote(str(run_dir))}"
    if nodes * per_node > 1:
        command += f" --nproc-per-node {per_node}"
        if nodes > 1:
            command += f" --nnodes {nodes} --node-rank R --rdzv-endpoint HOST:PORT"
    return command


def _interrupted(exc: Any, command: str, trainer: Any) -> dict[str, Any]:
    """What a stopped run reports: where it stopped, the checkpoint, the exact command that continues it."""
    if exc.checkpoint is not None:
        saved = f"checkpoint {exc.checkpoint} written"
    else:
        saved = f"no checkpoint could be written now; the last good one is {trainer.last_good}" \
            if trainer.last_good else "no checkpoint could be written"
    where = f"epoch {exc.epoch + 1}, batch {exc.batch}" if exc.batch else f"the end of epoch {exc.epoch}"
    text = (f"fasttrain: stopped by {exc.signal_name} after optimizer step {exc.step} ({where}); {saved}."
            f"\nfasttrain: resume with: {command}")
    return {"interrupted": exc.signal_name, "exit_code": exc.exit_code, "stopped_at": {
            "epoch": exc.epoch + 1, "batch": exc.batch, "step": exc.step},
            "checkpoint_written": str(exc.checkpoint) if exc.checkpoint else None,
            "resume_command": command, "stop_message": text}


def _faults(trainer: Any, prep: Prepared, bundle: Any) -> dict[str, Any]:
    bad = bundle.bad_files() if hasattr(bundle, "bad_files") else []
    return {"bad_files": len(bad), "bad_file_paths": bad[:20], "oom_backoffs": list(trainer.oom_events),
            "micro_batch": trainer.engine.micro_batch(prep.plan.batch_size),
            "accumulation_steps": trainer.accumulation * trainer.engine.splits,
            "effective_batch": prep.plan.effective_batch, "nonfinite_steps": trainer.nonfinite_total,
            "checkpoint_errors": list(trainer.checkpoint_errors),
            "resumed_from": str(prep.resume_path) if prep.resume_path else None,
            "last_good_checkpoint": str(trainer.last_good) if trainer.last_good else None}


def forecast_for_run(prep: Prepared) -> dict[str, Any] | None:
    """The `estimate` forecast for this run, set beside the measured figures on the dashboard. It only informs:
    any failure (an unusual model, a missing GPU spec) means no forecast, never a failed run."""
    try:
        from fasttrain.estimate.gather import Request, forecast_for
        req = Request(model=prep.model_name, num_classes=prep.bundle.num_classes,
                      dataset_size=prep.bundle.train_size, dataset_size_source="data", epochs_flag=None,
                      image_size_flag=None, sets=[], gpu=None, loader=None)
        fc, _ = forecast_for(prep.resolved.profile, req, prep.report)
    except Exception:  # noqa: BLE001 - see docstring
        return None
    out = {"images_per_s": fc.speed.get("images_per_s"), "step_time_s": fc.speed.get("step_time_s")}
    if prep.plan.device == "cuda":
        out["peak_memory_bytes"] = fc.memory.total
    return {k: v for k, v in out.items() if v is not None} or None


def _summary(prep: Prepared, result: Any, run_dir: Path, wall_s: float, bundle: Any, torch: Any) -> dict[str, Any]:
    if result is None:  # stopped before fit() began
        from fasttrain.train.loop import FitResult
        result = FitResult(epochs_run=0, best_acc1=None, best_epoch=None, stopped_early=False)
    last = result.history[-1] if result.history else {}
    images = sum(r.get("train_images", 0) for r in result.history)
    train_s = sum(r.get("train_s", 0.0) for r in result.history)
    return {
        "run_dir": str(run_dir), "profile": prep.profile_ref, "model": prep.model_name, "data": prep.args.data,
        "device": prep.plan.device, "precision": prep.plan.precision, "world_size": prep.plan.world_size,
        "epochs_run": result.epochs_run, "stopped_early": result.stopped_early,
        "final_val_acc1": last.get("val_acc1"), "final_val_acc5": last.get("val_acc5"),
        "final_val_loss": last.get("val_loss"), "final_train_loss": last.get("train_loss"),
        "best_val_acc1": result.best_acc1, "best_epoch": result.best_epoch,
        "train_images_per_s": images / train_s if train_s else None,
        "wall_s": wall_s, "fit_s": result.wall_s,
        "checkpoint_last": str(run_dir / "last.pt"),
        "checkpoint_best": str(run_dir / "best.pt") if (run_dir / "best.pt").exists() else None,
        "sanity_check": result.sanity, "notes": result.notes, "history": result.history,
        "torch": torch.__version__, "seed": prep.args.seed,
    }


def _short(summary: dict[str, Any]) -> dict[str, Any]:
    """What the dashboard prints at the end (the full summary is in summary.json)."""
    keys = ("run_dir", "epochs_run", "final_val_acc1", "final_val_acc5", "best_val_acc1", "best_epoch",
            "train_images_per_s", "wall_s", "checkpoint_last", "bad_files", "nonfinite_steps", "interrupted")
    short = {k: summary[k] for k in keys if summary.get(k) is not None}
    if summary.get("oom_backoffs"):
        short["oom_backoffs"] = " ".join(f"{e['batch_from']}->{e['batch_to']}" for e in summary["oom_backoffs"])
        short["micro_batch"] = summary["micro_batch"]
    if summary.get("checkpoint_errors"):
        short["checkpoint_errors"] = len(summary["checkpoint_errors"])
    return short


