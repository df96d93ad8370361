"""`fasttrain bench loader|speedups|batch`: measure on this machine instead of trusting the notes' guesses.

gather (probe, profile, data, model) -> compute (bench/loader.py / bench/speedups.py / train/batch_search.py, pure summaries)
-> render (bench/view.py, or --json). Every bench writes its result to runs/bench-<kind>-<time>/result.json
(or --out DIR). torch is imported inside the commands only: cli.py imports this module for --help.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Optional

import typer

from fasttrain.commands import options
from fasttrain.core.errors import Problem, UserError
from fasttrain.bench import view as bench_view
from fasttrain.core.console import console, print_json

bench_app = typer.Typer(help="Measure on this machine: loader throughput per worker count, what each speed setting "
                             "buys, the largest batch that fits.", no_args_is_help=True)

OutOpt = typer.Option(None, "--out", help="Directory for result.json (default runs/bench-<kind>-<time>/).")


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


# -- gather helpers ------------------------------------------------------------------------------------------
def _setup(profile: str | None, sets: list[str] | None, image_size: int | None) -> tuple[Any, Any, str]:
    """(HardwareReport, resolved Profile, profile ref) for this machine."""
    from fasttrain.profiles import presets
    from fasttrain.hardware.machine import probe

    if image_size is not None and image_size < 8:
        raise UserError([Problem("--image-size", "must be at least 8 pixels", value=image_size)])
    report = probe()
    if profile is None:
        from fasttrain.profiles.recommend import best_preset

        profile = best_preset(report)
    flags = {"loader.image_size": ("--image-size", image_size)} if image_size is not None else None
    resolved = presets.resolve(profile, sets=sets or [], flags=flags)
    return report, resolved.profile, profile


def _say() -> Any:
    """Progress lines on stderr (stdout stays clean for --json)."""
    def say(text: str) -> None:
        print(f"  {text}", file=sys.stderr, flush=True)
    return say


def _batch(value: str | None, plan: Any, model: str, image_size: int, num_classes: int, optim: Any,
           say: Any) -> tuple[int | None, str | None]:
    """--batch-size: None (profile's), a number, or auto -> (batch, message). auto gives the batch `train
    --batch-size auto` would run: the largest that fits, capped at the profile's samples per optimizer step."""
    if value is None:
        return None, None
    from fasttrain.train.batch_search import check_batch_option

    n = check_batch_option(value)
    if n is not None:
        return n, None
    from fasttrain.train.batch_search import auto_batch

    say("--batch-size auto: searching the largest batch that fits (cached after the first run)")
    auto = auto_batch(plan, model, image_size, num_classes=num_classes, optim=optim)
    return auto.batch, auto.message


def _save(kind: str, out: Path | None, result: dict[str, Any], report: Any) -> Path:
    from fasttrain.bench.results import envelope, new_bench_dir, write_result

    run_dir = out if out is not None else new_bench_dir(kind)
    data = envelope(kind, result, report)
    path = write_result(run_dir, data)
    result.update({k: data[k] for k in ("schema", "kind", "created_at", "machine")})
    result["result_path"] = str(path)
    return path


def _names(value: str | None, flag: str, allowed: list[str]) -> list[str] | None:
    if not value:
        return None
    from fasttrain.core.suggest import did_you_mean

    names = [n.strip() for n in value.split(",") if n.strip()]
    bad = [n for n in names if n not in allowed]
    if bad:
        raise UserError([Problem(flag, f"unknown setting {b!r}", did_you_mean(b, allowed) or
                                 "choose from " + ", ".join(allowed)) for b in bad])
    return names


# -- bench speedups ------------------------------------------------------------------------------------------
@bench_app.command("speedups")
def speedups_cmd(
    model: str = options.model_option("resnet18"),
    profile: Optional[str] = options.profile_option(),
    sets: Optional[list[str]] = options.set_option(),
    image_size: Optional[int] = options.image_size_option(),
    batch_size: Optional[str] = options.batch_size_option(),
    num_classes: int = typer.Option(10, "--num-classes", min=2),
    steps: int = typer.Option(3, "--steps", min=1, help="Timed training steps per configuration per round."),
    rounds: int = typer.Option(3, "--rounds", min=1, help="Interleaved rounds; the speed-up is the median."),
    warmup: int = typer.Option(2, "--warmup", min=1, help="Untimed steps first (compilation, autotuning)."),
    only: Optional[str] = typer.Option(None, "--only", help="Comma list of settings to measure (default: all)."),
    skip: Optional[str] = typer.Option(None, "--skip", help="Comma list of settings to leave out, e.g. compile."),
    as_json: bool = options.json_option(),
    out: Optional[Path] = OutOpt,
) -> None:
    """Training images/s with each speed setting switched on alone from an fp32 baseline, then all together,
    beside the speed-ups the field notes claim. Synthetic inputs on the device: the model alone."""
    from fasttrain.bench.speedups import bench_speedups
    from fasttrain.bench.variants import SETTINGS

    names = [n for n, _ in SETTINGS]
    chosen = _names(only, "--only", names)
    left_out = _names(skip, "--skip", names) or []
    if chosen is None and left_out:
        chosen = [n for n in names if n not in left_out]
    elif chosen is not None:
        chosen = [n for n in chosen if n not in left_out]
    report, prof, ref = _setup(profile, sets, image_size)
    from fasttrain.models.registry import create_model
    from fasttrain.plan import make_plan

    create_model(model, num_classes)  # an unknown name fails now, with close matches
    size = prof.loader.image_size
    say = _say()
    batch, batch_msg = _batch(batch_size, make_plan(prof, report), model, size, num_classes, prof.optim, say)
    result = bench_speedups(prof, report, lambda: create_model(model, num_classes), image_size=size,
                            num_classes=num_classes, batch=batch, steps=steps, rounds=rounds, warmup_steps=warmup,
                            only=chosen, progress=say)
    result.update(model=model, profile=ref, batch_message=batch_msg)
    path = _save("speedups", out, result, report)
    _remember_speedups(result, report, model)
    if as_json:
        print_json(result)
        return
    bench_view.render_speedups(result, path, console())


def _remember_speedups(result: dict[str, Any], report: Any, model: str) -> None:
    """What bench speedups measured goes to the measurement cache, where doctor, estimate and train's verdict
    read it (tuning/store.py): no command then suggests a setting measured slower here."""
    from datetime import date

    from fasttrain.bench.remember import measurements_from_rows
    from fasttrain.tuning.store import TrialKey, machine_id, record

    found = measurements_from_rows(result["rows"], date.today().isoformat())
    if not found:
        return
    key = TrialKey(machine_id(report), model, "synthetic", result["image_size"], result["batch_size"],
                   report.torch.version or "unknown")
    try:
        record(key, measurements=found)
    except UserError:  # an unusable cache directory: the result file still has every figure
        pass


# -- bench batch ---------------------------------------------------------------------------------------------
@bench_app.command("batch")
def batch_cmd(
    model: str = options.model_option("resnet18"),
    profile: Optional[str] = options.profile_option(),
    sets: Optional[list[str]] = options.set_option(),
    image_size: Optional[int] = options.image_size_option(),
    num_classes: int = typer.Option(1000, "--num-classes", min=2),
    max_batch: Optional[int] = typer.Option(None, "--max-batch", min=1,
                                            help="Stop growing here (default 4096 on a GPU, 256 on the CPU)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Search again even when a cached result exists."),
    as_json: bool = options.json_option(),
    out: Optional[Path] = OutOpt,
) -> None:
    """The largest per-device batch that runs a full training step (forward, backward, optimizer step) in the
    profile's precision and memory format, with a safety margin; then the accumulation that keeps the profile's
    effective batch."""
    from fasttrain.train import batch_search as bs
    from fasttrain.models.registry import create_model
    from fasttrain.plan import make_plan

    report, prof, ref = _setup(profile, sets, image_size)
    create_model(model, num_classes)
    plan = make_plan(prof, report)
    say = _say()
    say(f"searching on {plan.device} in {plan.precision}" + (", channels_last" if plan.channels_last else ""))
    auto = bs.auto_batch(plan, model, prof.loader.image_size, num_classes=num_classes, optim=prof.optim,
                         use_cache=not no_cache, max_batch=max_batch,
                         activation_checkpointing=prof.speed.activation_checkpointing)
    result = {"model": model, "profile": ref, "device": plan.device, "precision": plan.precision,
              "channels_last": plan.channels_last, "image_size": prof.loader.image_size, **auto.to_dict()}
    if plan.device != "cuda":
        result["note"] = ("no GPU: host RAM is the only limit on the CPU, so the search stops at --max-batch; "
                          "the figure matters on a GPU")
    path = _save("batch", out, result, report)
    if as_json:
        print_json(result)
        return
    bench_view.render_batch(result, auto, path, console())


# -- bench loader --------------------------------------------------------------------------------------------
@bench_app.command("loader")
def loader_cmd(
    data: str = typer.Option("shapes", "--data", help="shapes (built-in) or an ImageFolder directory."),
    profile: Optional[str] = options.profile_option(),
    sets: Optional[list[str]] = options.set_option(),
    image_size: Optional[int] = options.image_size_option(),
    batch_size: Optional[str] = options.batch_size_option(),
    max_workers: Optional[int] = typer.Option(None, "--max-workers", min=0,
                                              help="Largest worker count to try (default: the cores and one step "
                                                   "past them)."),
    prefetch: str = typer.Option("2,4", "--prefetch", help="Comma list of prefetch_factor values."),
    batches: int = typer.Option(80, "--batches", min=1, help="Timed batches per setting per round."),
    rounds: int = typer.Option(3, "--rounds", min=1, help="Interleaved rounds; rates are medians."),
    max_seconds: float = typer.Option(2.5, "--max-seconds", min=0.1, help="Time cap per setting per round."),
    model: str = options.model_option("tiny_cnn", help="Model whose training rate the loader must keep up with; "
                                                       "none to skip that check."),
    paths: bool = typer.Option(True, "--paths/--no-paths", help="Also compare input paths on a sample of the files: "
                                                                 "torchvision's ImageFolder + PIL, the fast decode "
                                                                 "path, prepared shards, GPU decode."),
    compare_images: int = typer.Option(256, "--compare-images", min=8, max=100_000,
                                       help="Files sampled for the path comparison."),
    shards: Optional[Path] = typer.Option(None, "--shards", metavar="DST",
                                          help="A prepared set to compare (default: the sample is prepared into a "
                                               "temporary folder)."),
    write_profile: Optional[Path] = typer.Option(None, "--write-profile",
                                                 help="Write a profile YAML (extends the one measured) with the "
                                                      "recommended loader settings."),
    as_json: bool = options.json_option(),
    out: Optional[Path] = OutOpt,
) -> None:
    """Images/s the input pipeline delivers and the host RAM it holds, per num_workers x prefetch_factor, with
    the profile's batch and augmentation; the knee, the recommended setting within the RAM budget, and whether it
    keeps up with the model."""
    from fasttrain.bench import loader as bl
    from fasttrain.bench import loader_choice as bch
    from fasttrain.bench import loader_sweep as bsw
    from fasttrain.bench.remember import workers_measurement

    factors = _prefetch_factors(prefetch)
    report, prof, ref = _setup(profile, sets, image_size)
    say = _say()
    train_model = None if model.lower() == "none" else model
    bundle, plan, batch_msg = _loader_inputs(data, report, prof, batch_size, train_model, say)
    settings = bsw.sweep_settings(bsw.worker_counts(report.cores, max_workers), factors)
    say(f"{len(settings)} settings x {rounds} rounds on {bundle.train_size} images ({data}), batch "
        f"{plan.batch_size}, {plan.image_size} px")
    samples = bl.sweep(bundle, plan, settings, rounds=rounds, batches=batches, max_seconds=max_seconds,
                       progress=say)
    points = bsw.combine_rounds(samples)
    knee = bch.find_knee(points)
    choice, why = bch.recommend(points, plan.ram_budget_bytes)
    train_rate, source = _training_rate(prof, plan, train_model, bundle, say)
    up = bch.keeps_up(choice.images_per_s, train_rate, cpu_only=plan.device != "cuda", source=source)
    result = bch.summary(points, samples, plan, choice, why, knee, up, data=data, profile=ref, cores=report.cores,
                        rounds=rounds, batches=batches, model=train_model, batch_message=batch_msg)
    if paths:
        from fasttrain.bench.paths import compare_paths

        compared = compare_paths(bundle, data, augment=prof.augment, image_size=plan.image_size,
                                 batch_size=plan.batch_size, workers=choice.workers, images=compare_images,
                                 rounds=rounds, max_seconds=max_seconds, train_rate=train_rate, shards=shards,
                                 progress=say)
        result.update(paths=compared["paths"], paths_recommendation=compared["recommendation"],
                      paths_sample_images=compared["sample_images"], paths_workers=compared["workers"])
    if write_profile is not None:
        note = (f"written by `fasttrain bench loader` ({data}, batch {plan.batch_size}, {plan.image_size} px): "
                f"{choice.images_per_s:.0f} img/s\n{why}")
        bl.write_profile(write_profile, ref, choice, note)
        result["profile_written"] = str(write_profile)
    result["advice"] = _remember_loader(workers_measurement(points, choice, plan.workers, _today()), bundle.kind,
                                        plan, report)
    path = _save("loader", out, result, report)
    if as_json:
        print_json(result)
        return
    claim = ""
    if result.get("speedup_over_0_workers"):
        from fasttrain.bench.claims import claims_text, load_claims
        _, claim = claims_text("workers", load_claims())
    bench_view.render_loader(result, points, knee, choice, claim, path, console())


def _today() -> str:
    from datetime import date
    return date.today().isoformat()


def _remember_loader(found: Any, kind: str, plan: Any, report: Any) -> dict[str, Any]:
    """The recommended worker count goes to the measurement cache, keyed by this machine and torch, the data kind,
    image size and batch (no model): train's plan and doctor read it through tuning/advice.workers_advice, the
    same code that gives here the count they will use -> {workers, text, recorded}."""
    from fasttrain.tuning.advice import workers_advice
    from fasttrain.tuning.store import loader_key, record

    recorded = True
    try:
        record(loader_key(report, kind, plan.image_size, plan.batch_size), measurements=[found])
    except UserError:  # an unusable cache directory: the result file still has every figure
        recorded = False
    advice = workers_advice([found], plan.workers, report.cores)
    return {"workers": advice.value, "text": advice.text, "recorded": recorded}


def _prefetch_factors(prefetch: str) -> tuple[int, ...]:
    """--prefetch "2,4" -> (2, 4), sorted and without repeats."""
    try:
        factors = tuple(sorted({int(p) for p in prefetch.split(",") if p.strip()}))
    except ValueError:
        factors = ()
    if not factors or min(factors) < 1:
        raise UserError([Problem("--prefetch", "expected a comma list of positive integers", "e.g. --prefetch 2,4",
                                 prefetch)])
    return factors


def _loader_inputs(data: str, report: Any, prof: Any, batch_size: str | None, train_model: str | None,
                   say: Any) -> tuple[Any, Any, str | None]:
    """(dataset bundle, plan with the batch to measure, --batch-size auto message) for `bench loader`."""
    if data == "synthetic":
        raise UserError([Problem("--data", "synthetic data has no input pipeline to measure",
                                 "use shapes or an image directory", data)])
    from fasttrain.datasets.build import build_datasets
    from fasttrain.plan import make_plan

    bundle = build_datasets(data, image_size=prof.loader.image_size, augment=prof.augment, seed=0)
    if bundle.kind != "images":
        raise UserError([Problem("--data", "bench loader measures image folders", "use shapes or a directory",
                                 data)])
    plan = make_plan(prof, report, dataset_size=bundle.train_size)
    batch, batch_msg = _batch(batch_size, plan, train_model or "tiny_cnn", plan.image_size, bundle.num_classes,
                              prof.optim, say)
    if batch is not None:
        import dataclasses
        plan = dataclasses.replace(plan, batch_size=batch)
    if plan.batch_size > bundle.train_size:
        raise UserError([Problem("loader.batch_size", f"larger than the {bundle.train_size} training images",
                                 "lower it with --batch-size", plan.batch_size)])
    return bundle, plan, batch_msg


def _training_rate(prof: Any, plan: Any, train_model: str | None, bundle: Any, say: Any) -> tuple[float | None, str]:
    """(training images/s the loader must keep up with, where it comes from): estimate's forecast for the
    profile's GPU when this machine has none, else measured here; (None, ...) with --model none."""
    from fasttrain.bench import loader as bl

    train_rate, source = None, "measured here"
    forecast = None
    if train_model is not None and plan.device != "cuda":  # the profile's GPU is not here: forecast it
        forecast = bl.forecast_rate(prof, train_model, num_classes=bundle.num_classes, dataset_size=bundle.train_size)
    if forecast is not None:
        train_rate, source = forecast
    elif train_model is not None:
        say(f"measuring the training rate of {train_model} (synthetic inputs, same step code as train)")
        train_rate = bl.training_rate(plan, train_model, image_size=plan.image_size, num_classes=bundle.num_classes)
        if prof.hardware.gpu and plan.device != "cuda":
            source = f"measured on this CPU; no forecast for the profile's {prof.hardware.gpu}"
    return train_rate, source


# -- bench compare -------------------------------------------------------------------------------------------
def _shown_path(path: Path) -> str:
    """A path as one short line: control characters escaped, long ones cut in the middle."""
    text = repr(str(path))[1:-1]
    return text if len(text) <= 120 else text[:58] + "..." + text[-58:]


@bench_app.command("compare")
def compare_cmd(
    a: Path = typer.Argument(..., metavar="A", help="A result.json or a bench run directory."),
    b: Path = typer.Argument(..., metavar="B", help="Another one of the same kind (other machine or version)."),
    as_json: bool = options.json_option(),
) -> None:
    """Two bench results side by side: images/s of A and B per row and the ratio B/A."""
    from fasttrain.bench.results import NotAResult, compare, load_result

    loaded, problems = [], []
    for name, path in (("A", a), ("B", b)):
        try:
            loaded.append(load_result(path))
        except NotAResult as exc:
            problems.append(Problem(f"{name} {_shown_path(path)}", f"not a bench result: {exc}",
                                    "give a result.json or a runs/bench-* directory written by `fasttrain bench`"))
    if problems:
        raise UserError(problems)
    try:
        result = compare(*loaded)
    except ValueError as exc:
        raise UserError([Problem("A/B", str(exc), "compare two results of the same bench")]) from exc
    if as_json:
        print_json(result)
        return
    bench_view.render_compare(result, console())
