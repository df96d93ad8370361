"""`fasttrain train` up to the plan: final arguments, profile, machine, data, model, batch, plan.

gather: the arguments (args.py), the profile resolved once (flags > --set > env > file), the machine probed,
the data opened, the model named and checked on the meta device. compute: the plan (plan.py, pure), sized to
this machine (_plan_run says when and why it is made more than once). Every bad input raises UserError here,
before any training starts. Data-parallel: the process given --nproc-per-node checks everything here, then
parallel/launch.py starts the workers; a worker (torchrun's environment) takes its world size from it.
Imported lazily by commands/train.py, so torch is imported only when a training actually starts.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fasttrain.core.errors import Problem, UserError
from fasttrain.datasets.bundle import DataBundle
from fasttrain.datasets.transforms import IMAGENET, Norm
from fasttrain.hardware.report import HardwareReport
from fasttrain.models.weights import WeightsMatch
from fasttrain.plan import Plan, make_plan
from fasttrain.profiles import presets
from fasttrain.profiles.presets import Resolved
from fasttrain.profiles.schema import LoaderSpec
from fasttrain.train.parallel.launch import worker_world
from fasttrain.train.setup.args import check_runs_dir, final_args, flag_overrides
from fasttrain.train.setup.world import no_full_batch, world_or_target
from fasttrain.train.state.run_state import Resume
from fasttrain.train.types import Prepared, TrainArgs, WorkerWorld
from fasttrain.tuning.store import Measurement

# Model used when --model is not given, by kind of data.
DEFAULT_MODELS = {"shapes": "tiny_cnn", "synthetic": "tiny_cnn", "images": "resnet18"}


def probe() -> HardwareReport:
    from fasttrain.hardware.machine import probe as hardware_probe
    return hardware_probe()


def choose_profile(args: TrainArgs, report: HardwareReport) -> tuple[str, str]:
    if args.profile:
        return args.profile, "--profile"
    from fasttrain.profiles.preset_match import best_preset
    name = best_preset(report)
    return name, "fits this machine (fasttrain.profiles.recommend.best_preset)"


def prepare(given: TrainArgs) -> Prepared:
    """Everything up to the plan; every bad input raises UserError before any training starts."""
    world = worker_world()
    args, resume = final_args(given, world)
    if not args.dry_run and (world is None or world.is_main):
        check_runs_dir(args.runs_dir / args.run_name if resume is not None and args.run_name else args.runs_dir)
    from fasttrain.train.parallel.agree import claim_device
    claim_device(world, launching=args.launch is not None)  # before any CUDA work (the probe's, the search's)
    report = probe()
    ref, reason = choose_profile(args, report)
    resolved = presets.resolve(ref, sets=args.sets, flags=flag_overrides(args, world))
    from fasttrain.train.state.resume import check_keep_last
    check_keep_last(args, resolved.profile.checkpoint.save_last, resume)  # --no-last: no resume point, none used
    resolved, data_notes = _check_data(args, resolved)
    resolved, budget_note = _budget_schedule(args, resolved)
    norm, norm_notes = _run_norm(args, resolved)
    bundle = _open_data(args, resolved, report, norm)
    model_name = args.model or _default_model(args.data, bundle.kind)
    from fasttrain.models.given_model import seed_builds
    seed_builds(args.seed)  # a module:callable builder, called once from here on, initialises with the run's seed
    from fasttrain.models.registry import check_model_input
    check_model_input(model_name, resolved.profile.loader.image_size, bundle.num_classes)  # on meta: no memory
    init = _check_weights(args, resume, model_name, bundle.num_classes, resolved.profile.loader.image_size)
    from fasttrain.train.setup.finetune import fine_tune  # a resume keeps --weights/--pretrained: the same LR
    resolved, tune_note = fine_tune(resolved, args.weights or (f"{model_name}'s pretrained weights"
                                                               if args.pretrained else None))
    resolved, report, plan = _plan_run(args, resolved, report, bundle, model_name, world, resume,
                                       [*data_notes, *(n for n in (budget_note, tune_note) if n), *norm_notes])
    if plan.iterations_per_epoch == 0:
        raise UserError([Problem("loader.batch_size", no_full_batch(bundle.train_size, plan.world_size),
                                 "lower it with --set loader.batch_size=N", plan.batch_size)])
    if resume is not None:
        from fasttrain.train.state.resume import check_resumable
        # a budget without --epochs ends the run, not optim.epochs: a budgeted run is never "already finished"
        budgeted = budget_note is not None and not args.epochs
        check_resumable(resume, plan, max(resolved.profile.optim.epochs, resume.state.position.epoch + 1) if budgeted
                        else resolved.profile.optim.epochs)
    prep = Prepared(args, resolved, report, plan, bundle, model_name, ref, reason, resume, world, init=init)
    from fasttrain.train.trial.choice import apply_cached
    plan, cached = apply_cached(prep)
    return replace(prep, plan=plan, tuning=cached)


def _check_weights(args: TrainArgs, resume: Resume | None, model_name: str, num_classes: int,
                   image_size: int) -> WeightsMatch | None:
    """--weights matched to the model on the meta device (models/weights.py); None without it, and on a resume,
    whose checkpoint holds the trained weights (the file is not read again: it may have moved since)."""
    if args.pretrained and resume is None:
        from fasttrain.models.pretrained import check_pretrained
        check_pretrained(model_name)  # a model without published weights fails before the run, dry run too
    if not args.weights or resume is not None:
        return None
    if args.pretrained:
        raise UserError([Problem("--weights", "and --pretrained both give the starting weights",
                                 "keep one: --weights FILE or --pretrained", args.weights)])
    from fasttrain.models.weights import check_weights
    return check_weights(args.weights, model_name, num_classes, image_size)


def _budget_schedule(args: TrainArgs, resolved: Resolved) -> tuple[Resolved, str | None]:
    """A time budget ends the LR at its floor at the deadline: a cosine schedule over the budget (a preset's other
    schedule is replaced; the user's is kept and said). -> (the profile, the plan's note or None)."""
    given = next((f for f, v in (("--time-budget", args.time_budget), ("--deadline", args.deadline),
                                 ("--max-cost", args.max_cost)) if v is not None), None)
    if given is None:
        return resolved, None
    optim = resolved.profile.optim
    cap = f"at most --epochs {args.epochs}" if args.epochs else f"optim.epochs {optim.epochs} is not used"
    note = (f"time budget ({given}): epochs are planned from the step time and re-planned as the run measures it "
            f"({cap}); the {optim.schedule} LR reaches its floor at the deadline; the last validation and "
            "checkpoint finish inside the budget")
    if optim.schedule == "cosine":
        return resolved, note
    if resolved.user_set("optim.schedule"):
        return resolved, note.replace(f"the {optim.schedule} LR reaches its floor at the deadline",
                                      f"optim.schedule {optim.schedule} (yours) does not end at a floor: cosine does")
    return resolved.with_flags({"optim.schedule": ("time budget", "cosine")}), note.replace(
        f"the {optim.schedule} LR", "the cosine LR (not the preset's " + optim.schedule + ")")


def _check_data(args: TrainArgs, resolved: Resolved) -> tuple[Resolved, list[str]]:
    """What the data are (a labels table's columns and classes, class folders that look like splits:
    datasets/data_source.py), then flips and the crop's scale measured against the images of a folder or a table
    (datasets/augment_check.py, the same check `estimate --data` runs) -> (the profile, the plan's notes)."""
    if args.data in DEFAULT_MODELS:
        return resolved, []
    from fasttrain.datasets.data_source import data_notes, table_of
    from fasttrain.datasets.image_folder import VAL_FRACTION
    notes = data_notes(args.data, resolved.profile.data, seed=args.seed, val_fraction=VAL_FRACTION)
    path = Path(args.data)
    if ":" in args.data or (not path.is_dir() and table_of(path) is None):
        return resolved, notes
    from fasttrain.datasets.augment_check import check_augment
    resolved, checked = check_augment(path, resolved, args.seed)
    return resolved, [*notes, *checked]


def _run_norm(args: TrainArgs, resolved: Resolved) -> tuple[Norm, list[str]]:
    """The (mean, std) the run's images are normalised with, and the plan's notes: `--pretrained --model M`: M's
    published weights' own (setup/finetune.pretrained_norm); otherwise ImageNet's."""
    if not args.pretrained or not args.model:  # the default models (tiny_cnn, resnet18) use ImageNet's anyway
        return IMAGENET, []
    from fasttrain.models.pretrained import pretrained_data_config
    from fasttrain.train.setup.finetune import pretrained_norm
    return pretrained_norm(args.model, pretrained_data_config(args.model), resolved.profile.loader.image_size)


def _open_data(args: TrainArgs, resolved: Resolved, report: HardwareReport, norm: Norm) -> DataBundle:
    from fasttrain.datasets.build import build_datasets
    from fasttrain.datasets.decoded import decode_budget
    profile = resolved.profile
    bundle = build_datasets(args.data, image_size=profile.loader.image_size, augment=profile.augment,
                            seed=args.seed, strict=args.strict_data, num_classes=args.num_classes,
                            decode=decode_budget(profile, report), table=profile.data, norm=norm)
    if args.num_classes is not None and bundle.kind == "images" and args.num_classes != bundle.num_classes:
        raise UserError([Problem("--num-classes", f"the data has {bundle.num_classes} classes",
                                 "drop --num-classes for image folders and labels tables", args.num_classes)])
    return bundle


def _plan_run(args: TrainArgs, resolved: Resolved, report: HardwareReport, bundle: DataBundle, model_name: str,
              world: WorkerWorld | None, resume: Resume | None,
              notes: list[str]) -> tuple[Resolved, HardwareReport, Plan]:
    """The run's profile, machine and plan. The plan is made from the profile as resolved; it is made again
    only where a decision changes what it is made from, and this is the one place that does so:
      1. `--batch-size auto`: the largest batch that runs here (setup/batch_search.py, cached) replaces the
         profile's; the search itself runs a plan of the profile as given on this machine, once per job: here,
         in a child of the launcher, or on rank 0 (setup/auto_job.py), and every rank trains its answer.
      2. A dry run of a GPU profile on a machine without that GPU plans for the profile's machine instead
         (setup/world.py), so the documented multi-GPU line shows its real plan.
      3. Any other batch is fitted to this machine's memory (setup/footprint.py): a batch that does not fit
         becomes micro-batches with accumulation (same effective batch and LR), or is refused.
      0. A preset's batch larger than a small data set is halved to fit it (setup/batch_math.fitted_to_data).
    The profile is validated again with each new batch (Resolved.with_flags: its provenance names the search
    or the fit, so `profiles show`, the run folder's profile.yaml and the plan agree). `notes`: the run's own
    notes so far (the flip check's), kept in every plan made here."""
    notes = list(notes)
    searched: str | None = None  # the auto batch's explanation, handed to the workers with the split
    if args.batch_size == "auto":  # searched once for the whole job (setup/auto_job.py says where)
        from fasttrain.train.setup.auto_job import job_auto_batch
        flags, searched = job_auto_batch(resolved.profile, report, model_name, bundle.num_classes, world=world,
                                         launching=args.launch is not None)
        resolved = resolved.with_flags(flags)
        notes.append(searched)
    plan = _make_plan(resolved, report, bundle, notes)
    if plan.iterations_per_epoch == 0 and not resolved.user_set("loader.batch_size"):  # 0. a preset's batch, a
        from fasttrain.train.setup.batch_math import fitted_to_data  # folder smaller than one batch
        fitted = fitted_to_data(plan.batch_size, bundle.train_size, plan.world_size)
        if fitted is not None:
            notes.append(f"batch {plan.batch_size} -> {fitted}: the {bundle.train_size:,} training samples hold no "
                         f"full batch of {plan.batch_size}; halved to leave a few steps per epoch (the LR scales "
                         "with it; --set loader.batch_size=N chooses)")
            resolved = resolved.with_flags({"loader.batch_size": ("fitted to the data", fitted)})
            plan = _make_plan(resolved, report, bundle, notes)
    report, plan = world_or_target(args.dry_run, resolved.profile, report, plan,
                                   lambda machine, note: _make_plan(resolved, machine, bundle, [*notes, note]),
                                   launched=world is not None or args.launch is not None)
    if args.batch_size != "auto":  # the search already sized it on this machine
        from fasttrain.train.setup import footprint
        micro, accumulation, note = footprint.check(plan, resolved.profile, report, model_name, bundle.num_classes,
                                                    worker=world is not None,
                                                    prefer=resume.state.saved_split() if resume is not None else None)
        if (micro, accumulation) != (plan.batch_size, plan.accumulation_steps):
            resolved = resolved.with_flags({"loader.batch_size": ("memory fit", micro),
                                            "optim.accumulation_steps": ("memory fit", accumulation)})
            plan = _make_plan(resolved, report, bundle, [*notes, *([note] if note else [])])
    if args.launch is not None and not args.dry_run:  # the workers take this split, so every rank agrees
        from fasttrain.train.setup.auto_job import hand_to_workers
        hand_to_workers(plan.batch_size, plan.accumulation_steps, searched)
    return resolved, report, plan


def _make_plan(resolved: Resolved, report: HardwareReport, bundle: DataBundle, notes: list[str]) -> Plan:
    """make_plan, with the run's own notes (an auto batch's explanation) after the plan's. Data in memory get
    0 workers unless the user set loader.num_workers (the preset's count is for decoding images); images decoded
    once into RAM always do (no worker has anything to do)."""
    own = resolved.user_set("loader.num_workers")
    decoded = bundle.decoded_in_ram
    if decoded and report.has_cuda:  # a dry run planned for a GPU machine: there its workers decode (decoded.py)
        decoded, bundle = False, replace(bundle, in_memory=None, input_note=None)
    in_memory = bundle.in_memory if decoded or not own else None
    measured = None if own or in_memory else _loader_measured(report, bundle.kind, resolved.profile.loader)
    input_note = (f"input: {bundle.input_note}",) if bundle.input_note else ()
    return make_plan(resolved.profile, report, dataset_size=bundle.train_size, extra_notes=(*input_note, *notes),
                     in_memory=in_memory, measured_workers=measured)


def _loader_measured(report: HardwareReport, kind: str, loader: LoaderSpec) -> list[Measurement]:
    """What `bench loader` measured on this machine for this data kind, image size and batch (the same
    measurements doctor recommends from); [] when nothing was, or the cache cannot be read."""
    from fasttrain.tuning.store import entry_measurements, loader_key, lookup
    try:
        return entry_measurements(lookup(loader_key(report, kind, loader.image_size, loader.batch_size)))
    except UserError:
        return []


def _default_model(spec: str, kind: str) -> str:
    if spec in DEFAULT_MODELS:
        return DEFAULT_MODELS[spec]
    if kind == "custom":
        raise UserError([Problem("--model", "required with --data module:callable",
                                 "name a timm/torchvision model or give module:callable for your own")])
    return DEFAULT_MODELS["images"]
