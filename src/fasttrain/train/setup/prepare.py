"""`fasttrain train` up to the plan: final arguments, profile, machine, data, model name, plan.

gather: resolve the profile (flags > --set > env > file), probe the machine, open the data, pick the model.
compute: make_plan() (pure, plan.py). Every bad input raises UserError here, before any training starts.
--resume: the checkpoint's own arguments (model, data, profile, seed, ...) fill every flag not given again,
so `fasttrain train --resume runs/NAME` alone continues the same run (resume.py finds the checkpoint).
Data-parallel: the process given --nproc-per-node checks everything here, then launch.py starts the workers
through torch.distributed.run; a worker (torchrun's environment) takes its world size from it.
Imported lazily by commands/train.py, so torch is imported only when a training actually starts.
"""
from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fasttrain.core.errors import Problem, UserError
from fasttrain.hardware.report import HardwareReport
from fasttrain.plan import Plan, check_image_size, make_plan
from fasttrain.profiles import presets
from fasttrain.profiles.presets import Resolved
from fasttrain.train.setup.batch_search import check_batch_option
from fasttrain.train.parallel.launch import (
    LaunchSpec,
    WorkerWorld,
    check_spec,
    worker_world,
    world_flags,
)
from fasttrain.train.setup.world import no_full_batch, world_or_target

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
    no_tune: bool = False                # --no-tune: no timed trial of the candidate settings (train/trial/tune.py)
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
    tuning: dict[str, Any] | None = None  # the cached tuning entry applied to the plan (train/trial/tune.py)

    @property
    def is_main(self) -> bool:
        return self.world is None or self.world.is_main


def probe() -> HardwareReport:
    from fasttrain.hardware.machine import probe as hardware_probe
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


def final_args(args: TrainArgs, world: WorkerWorld | None) -> tuple[TrainArgs, Path | None, dict[str, Any] | None]:
    """The arguments this run trains with -> (args, checkpoint to resume or None, its payload or None).
    A resume takes every flag not given again from the checkpoint and trains in the checkpoint's folder; a
    torchrun worker drops the launch flags (torchrun already launched it). Bad values raise UserError."""
    resume_path, payload = None, None
    if args.resume:
        from fasttrain.train.state.resume import find_checkpoint, with_saved_args
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


def check_minutes(value: object, flag: str = "--save-every-minutes") -> float | None:
    """A positive, finite number of minutes (nan, inf, 0 and negatives are refused), else UserError. Pure."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise UserError([Problem(flag, "must be a positive, finite number of minutes", "e.g. " + flag + " 30",
                                 value)])
    return float(value)


def _check_values(args: TrainArgs) -> None:
    for flag, value in (("--epochs", args.epochs), ("--num-classes", args.num_classes),
                        ("--save-every", args.save_every)):
        if value is not None and value < 1:
            raise UserError([Problem(flag, "must be at least 1", value=value)])
    if args.image_size is not None:
        check_image_size(args.image_size)
    check_minutes(args.save_every_minutes)  # also a resumed run's saved value, which no option callback has seen
    from fasttrain.train.signals.resilience import ON_NAN_MODES
    if args.on_nan not in ON_NAN_MODES:
        raise UserError([Problem("--on-nan", f"must be one of {', '.join(ON_NAN_MODES)}", value=args.on_nan)])


def prepare(given: TrainArgs) -> Prepared:
    """Everything up to the plan; every bad input raises UserError before any training starts."""
    world = worker_world()
    args, resume_path, payload = final_args(given, world)
    if not args.dry_run and (world is None or world.is_main):
        check_runs_dir(args.runs_dir / args.run_name if resume_path is not None and args.run_name else args.runs_dir)
    report = probe()
    ref, reason = choose_profile(args, report)
    resolved = presets.resolve(ref, sets=args.sets, flags=flag_overrides(args, world))
    from fasttrain.datasets.build import build_datasets
    from fasttrain.datasets.decoded import decode_budget
    bundle = build_datasets(args.data, image_size=resolved.profile.loader.image_size, augment=resolved.profile.augment,
                            seed=args.seed, strict=args.strict_data, num_classes=args.num_classes,
                            decode=decode_budget(resolved.profile, report))
    if args.num_classes is not None and bundle.kind == "images" and args.num_classes != bundle.num_classes:
        raise UserError([Problem("--num-classes", f"the data has {bundle.num_classes} class folders",
                                 "drop --num-classes for image folders", args.num_classes)])
    model_name = args.model or _default_model(args.data, bundle.kind)
    from fasttrain.models.registry import check_model_input
    check_model_input(model_name, resolved.profile.loader.image_size, bundle.num_classes)  # on meta: no memory
    notes: list[str] = []
    if args.batch_size is not None and check_batch_option(args.batch_size) is None:  # auto: search, then resolve
        resolved, auto_note = _auto_batch(args, ref, resolved, report, model_name, bundle.num_classes, world)
        notes.append(auto_note)
    plan = _make_plan(resolved, report, bundle, notes)
    report, plan = world_or_target(args.dry_run, resolved.profile, report, plan,
                                   lambda machine, note: _make_plan(resolved, machine, bundle, [*notes, note]),
                                   launched=world is not None or args.launch is not None)
    if args.batch_size is None or check_batch_option(args.batch_size) is not None:  # auto already sized it here
        resolved, plan = _fit_memory(args, ref, resolved, plan, report, model_name, bundle, world, notes,
                                     _saved_split(payload))
    profile = resolved.profile
    if plan.iterations_per_epoch == 0:
        raise UserError([Problem("loader.batch_size", no_full_batch(bundle.train_size, plan.world_size),
                                 "lower it with --set loader.batch_size=N", plan.batch_size)])
    if payload is not None:
        from fasttrain.train.state.resume import check_resumable
        check_resumable(payload, resume_path, plan, profile.optim.epochs)  # type: ignore[arg-type]
    prep = Prepared(args, resolved, report, plan, bundle, model_name, ref, reason, resume_path, payload, world)
    from fasttrain.train.trial.tune import apply_cached
    plan, cached = apply_cached(prep)
    return replace(prep, plan=plan, tuning=cached)


def check_runs_dir(target: Path) -> None:
    """Before any data or model is loaded: the run folder's parent can be made and written (a probe file is
    written and removed; folders made for it are removed again). Otherwise a UserError naming it."""
    made: list[Path] = []
    try:
        missing, parent = [], target
        while not parent.exists() and parent.parent != parent:
            missing.append(parent)
            parent = parent.parent
        for folder in reversed(missing):
            folder.mkdir()
            made.append(folder)
        probe_file = target / f".fasttrain-write-probe-{os.getpid()}"
        probe_file.write_bytes(b"")
        probe_file.unlink()
    except OSError as exc:
        raise UserError([Problem("--runs-dir", f"cannot create or write run folders in {str(target)!r} "
                                 f"({exc.strerror or type(exc).__name__})",
                                 "give --runs-dir DIR, a folder you can write (or run from a writable directory)")]) \
            from None
    finally:
        for folder in reversed(made):
            try:
                folder.rmdir()
            except OSError:
                pass


def _make_plan(resolved: Resolved, report: HardwareReport, bundle: Any, notes: list[str]) -> Plan:
    """make_plan, with the run's own notes (an auto batch's explanation) after the plan's. Data in memory get
    0 workers unless the user set loader.num_workers (the preset's count is for decoding images); images decoded
    once into RAM always do (no worker has anything to do)."""
    own = not resolved.provenance.get("loader.num_workers", "default").startswith(("preset", "default"))
    decoded = bundle.kind == "images" and bundle.in_memory is not None
    if decoded and report.has_cuda:  # a dry run planned for a GPU machine: there its workers decode (decoded.py)
        decoded, bundle = False, replace(bundle, in_memory=None, input_note=None)
    in_memory = bundle.in_memory if decoded or not own else None
    measured = None if own or in_memory else _loader_measured(report, bundle.kind, resolved.profile.loader)
    input_note = (f"input: {bundle.input_note}",) if bundle.input_note else ()
    return make_plan(resolved.profile, report, dataset_size=bundle.train_size, extra_notes=(*input_note, *notes),
                     in_memory=in_memory, measured_workers=measured)


def _loader_measured(report: HardwareReport, kind: str, loader: Any) -> list[Any]:
    """What `bench loader` measured on this machine for this data kind, image size and batch (the same
    measurements doctor recommends from); [] when nothing was, or the cache cannot be read."""
    from fasttrain.tuning.store import entry_measurements, loader_key, lookup
    try:
        return entry_measurements(lookup(loader_key(report, kind, loader.image_size, loader.batch_size)))
    except UserError:
        return []


def _fit_memory(args: TrainArgs, ref: str, resolved: Resolved, plan: Plan, report: HardwareReport, model_name: str,
                bundle: Any, world: WorkerWorld | None, notes: list[str],
                prefer: tuple[int, int] | None) -> tuple[Resolved, Plan]:
    """The whole training footprint against this machine (footprint.py, on the meta device): a batch that does
    not fit becomes micro-batches with accumulation (same effective batch and LR), re-resolved with its provenance
    so profile and plan agree; one that cannot fit is refused. A launching process hands its result to its workers."""
    from fasttrain.train.setup import footprint
    micro, accumulation, note = footprint.check(plan, resolved.profile, report, model_name, bundle.num_classes,
                                                worker=world is not None, prefer=prefer)
    if (micro, accumulation) != (plan.batch_size, plan.accumulation_steps):
        source = "memory fit"
        flags = {**flag_overrides(args, world), "loader.batch_size": (source, micro),
                 "optim.accumulation_steps": (source, accumulation)}
        resolved = presets.resolve(ref, sets=args.sets, flags=flags)
        plan = _make_plan(resolved, report, bundle, [*notes, *([note] if note else [])])
    if args.launch is not None and not args.dry_run:
        os.environ[footprint.HANDOFF_ENV] = f"{plan.batch_size},{plan.accumulation_steps}"
    return resolved, plan


def _saved_split(payload: dict[str, Any] | None) -> tuple[int, int] | None:
    """The (micro-batch, accumulation) a resumed checkpoint trained with, if it recorded them."""
    saved = (payload or {}).get("plan") or {}
    batch, accumulation = saved.get("batch_size"), saved.get("accumulation_steps")
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (batch, accumulation))
    return (batch, accumulation) if ok else None


def _check_launch(spec: LaunchSpec, world: WorkerWorld | None) -> None:
    check_spec(spec)
    if world is not None and (spec.nproc_per_node, spec.nnodes) != (world.local_world_size, world.nodes):
        raise UserError([Problem("--nproc-per-node", f"this process is a torchrun worker of a job of {world.nodes} "
                                 f"node(s) x {world.local_world_size} processes, not {spec.nnodes} x "
                                 f"{spec.nproc_per_node}", "drop the launch flags under torchrun",
                                 spec.nproc_per_node)])


def _auto_batch(args: TrainArgs, ref: str, resolved: Resolved, report: HardwareReport, model_name: str,
                num_classes: int, world: WorkerWorld | None) -> tuple[Resolved, str]:
    """--batch-size auto: the search on this machine (cached), applied as flags -> (re-resolved profile, its
    explanation). The search plans the profile as resolved without it; the final plan is made from the result."""
    from fasttrain.train.setup import batch_search
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
        "base_batch": prep.resolved.profile.optim.base_batch,
        "plan": p.to_dict(),
        "tuning": _tuning_view(prep),
        "notes": plan_notes(prep),
    }


def plan_notes(prep: Prepared) -> list[str]:
    """The profile's notes, then the plan's: what the run's dashboard opens with (without the rest of plan_view,
    whose tuning line would compute the forecast a second time)."""
    return [n.line() for n in prep.resolved.notes] + list(prep.plan.notes)


def _tuning_view(prep: Prepared) -> dict[str, Any]:
    """What the tuning trial found (cached), or why none will run, for --dry-run: the run's own decision
    (tune.no_trial_reason, with the forecast's step time the run would give it)."""
    from fasttrain.train.trial.tune import forecast_for_run, no_trial_reason, tuning_line

    if prep.tuning:
        return {"cached": True, **prep.tuning, "line": tuning_line({"cached": True, **prep.tuning})}
    forecast = forecast_for_run(prep) if not prep.args.no_tune and prep.bundle.kind != "custom" else None
    reason = no_trial_reason(prep, (forecast or {}).get("step_time_s"))
    findings = {"skipped": reason} if reason else None
    return {**(findings or {}), "line": tuning_line(findings)}


def _chosen(value: Any, requested: Any, reason: str) -> str:
    """`4 (as asked)`, `bf16-mixed (as asked; why)` when the plan kept it for a reason of its own, or
    `2 (asked 4: only 2 cores)` when the plan changed what the profile asked for."""
    if value == requested:
        return f"{value} (as asked)" if reason in ("", "asked") else f"{value} (as asked; {reason})"
    return f"{value} (asked {requested}: {reason})"


def plan_lines(view: dict[str, Any]) -> list[str]:
    from fasttrain.core.format import plural

    p = view["plan"]
    d = view["data"]
    base_batch = view.get("base_batch")
    lr = (f"{view['optimizer']} {p['base_lr']:g} @ base batch {base_batch} -> {p['scaled_lr']:.4g} at batch "
          f"{p['effective_batch']}" if base_batch is not None else
          f"{view['optimizer']} {p['base_lr']:g} -> {p['scaled_lr']:.4g} at batch {p['effective_batch']}")
    lines = [
        f"profile      {view['profile']} ({view['profile_reason']})",
        f"device       {p['device']}: {p['device_reason']}",
        f"precision    {_chosen(p['precision'], p['precision_requested'], p['precision_reason'])}",
        f"compile      {'on, mode ' + p['compile_mode'] if p['compile'] else 'off'} ({p['compile_reason']})",
        f"speed        channels_last={p['channels_last']} tf32={p['tf32']} cudnn_benchmark={p['cudnn_benchmark']} "
        f"fused_optimizer={p['fused_optimizer']}",
        f"batch        {p['batch_size']} per device x {p['accumulation_steps']} accumulation x "
        f"{plural(p['world_size'], 'device')} = effective batch {p['effective_batch']}",
        f"LR           {lr}, schedule {view['schedule']}",
        f"workers      {_chosen(p['workers'], p['workers_requested'], p['workers_reason'])}, "
        f"prefetch {p['prefetch_factor']}, pin_memory={p['pin_memory']}",
        f"data         {d['spec']} ({d['kind']}): {d['train_size']:,} train / {d['val_size']:,} val, "
        f"{plural(d['num_classes'], 'class', 'classes')}, {p['image_size']} px",
        f"iterations   {p['iterations_per_epoch']:,} per epoch x {plural(view['epochs'], 'epoch')}",
        f"model        {view['model']}",
        f"tuning       {view['tuning']['line']}",
    ]
    lines += [f"note         {n}" for n in view["notes"]]
    return lines
