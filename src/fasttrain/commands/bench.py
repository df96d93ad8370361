"""`fasttrain bench loader|speedups|batch`: measure on this machine instead of trusting the notes' guesses.

Each verb parses its flags, then gather (bench/gather.py: probe, profile, data, --batch-size) -> measure and
compute (bench/speedups.py, bench/loader.py, train/setup/batch_search.py; pure summaries beside them) -> render
(bench/view.py, or --json). Every bench writes its result to runs/bench-<kind>-<time>/result.json (or --out DIR,
bench/results.py) and what it measured to the measurement cache (bench/remember.py). torch is imported inside the
commands only: cli.py imports this module for --help.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import typer

from fasttrain.bench import view as bench_view
from fasttrain.commands import options
from fasttrain.core.console import console, print_json
from fasttrain.core.errors import Problem, UserError

bench_app = typer.Typer(help="Measure on this machine: loader throughput per worker count, what each speed setting "
                             "buys, the largest batch that fits.", no_args_is_help=True)

OutOpt = typer.Option(None, "--out", help="Directory for result.json (default runs/bench-<kind>-<time>/).")


def register(app: typer.Typer) -> None:
    app.add_typer(bench_app, name="bench")


def _say() -> Callable[[str], None]:
    """Progress lines on stderr (stdout stays clean for --json)."""
    def say(text: str) -> None:
        print(f"  {text}", file=sys.stderr, flush=True)
    return say


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


def _chosen_settings(only: str | None, skip: str | None) -> list[str] | None:
    """--only and --skip -> the settings to measure (None: all)."""
    from fasttrain.bench.variants import SETTINGS

    names = [n for n, _ in SETTINGS]
    chosen = _names(only, "--only", names)
    left_out = _names(skip, "--skip", names) or []
    if chosen is None and left_out:
        chosen = [n for n in names if n not in left_out]
    elif chosen is not None:
        chosen = [n for n in chosen if n not in left_out]
    return chosen


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


# -- bench speedups ------------------------------------------------------------------------------------------
@bench_app.command("speedups")
def speedups_cmd(
    model: str = options.model_option("resnet18"),
    profile: str | None = options.profile_option(),
    sets: list[str] | None = options.set_option(),
    image_size: int | None = options.image_size_option(),
    batch_size: str | None = options.batch_size_option(),
    num_classes: int = typer.Option(10, "--num-classes", min=2),
    steps: int = typer.Option(3, "--steps", min=1, help="Timed training steps per configuration per round."),
    rounds: int = typer.Option(3, "--rounds", min=1, help="Interleaved rounds; the speed-up is the median."),
    warmup: int = typer.Option(2, "--warmup", min=1, help="Untimed steps first (compilation, autotuning)."),
    only: str | None = typer.Option(None, "--only", help="Comma list of settings to measure (default: all)."),
    skip: str | None = typer.Option(None, "--skip", help="Comma list of settings to leave out, e.g. compile."),
    as_json: bool = options.json_option(),
    out: Path | None = OutOpt,
) -> None:
    """Training images/s with each speed setting switched on alone from an fp32 baseline, then all together,
    beside the speed-ups the field notes claim. Synthetic inputs on the device: the model alone."""
    from fasttrain.bench import gather
    from fasttrain.bench.remember import remember_speedups
    from fasttrain.bench.results import save_result
    from fasttrain.bench.speedups import bench_speedups

    chosen = _chosen_settings(only, skip)
    report, prof, ref = gather.setup(profile, sets, image_size)
    from fasttrain.models.registry import create_model
    from fasttrain.plan import make_plan

    create_model(model, num_classes)  # an unknown name fails now, with close matches
    size = prof.loader.image_size
    say = _say()
    batch, batch_msg = gather.batch_option(batch_size, make_plan(prof, report), model, size, num_classes, prof.optim,
                                           say)
    result = bench_speedups(prof, report, lambda: create_model(model, num_classes), image_size=size,
                            num_classes=num_classes, batch=batch, steps=steps, rounds=rounds, warmup_steps=warmup,
                            only=chosen, progress=say)
    result.update(model=model, profile=ref, batch_message=batch_msg)
    path = save_result("speedups", out, result, report)
    remember_speedups(result, report, model)
    if as_json:
        print_json(result)
        return
    bench_view.render_speedups(result, path, console())


# -- bench batch ---------------------------------------------------------------------------------------------
@bench_app.command("batch")
def batch_cmd(
    model: str = options.model_option("resnet18"),
    profile: str | None = options.profile_option(),
    sets: list[str] | None = options.set_option(),
    image_size: int | None = options.image_size_option(),
    num_classes: int = typer.Option(1000, "--num-classes", min=2),
    max_batch: int | None = typer.Option(None, "--max-batch", min=1,
                                            help="Stop growing here (default 4096 on a GPU, 256 on the CPU)."),
    no_cache: bool = typer.Option(False, "--no-cache", help="Search again even when a cached result exists."),
    as_json: bool = options.json_option(),
    out: Path | None = OutOpt,
) -> None:
    """The largest per-device batch that runs a full training step (forward, backward, optimizer step) in the
    profile's precision and memory format, with a safety margin; then the accumulation that keeps the profile's
    effective batch."""
    from fasttrain.bench import gather
    from fasttrain.bench.results import save_result
    from fasttrain.models.registry import create_model
    from fasttrain.plan import make_plan
    from fasttrain.train.setup import batch_search as bs

    report, prof, ref = gather.setup(profile, sets, image_size)
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
    path = save_result("batch", out, result, report)
    if as_json:
        print_json(result)
        return
    bench_view.render_batch(result, auto, path, console())


# -- bench loader --------------------------------------------------------------------------------------------
@bench_app.command("loader")
def loader_cmd(
    data: str = typer.Option("shapes", "--data", help="shapes (built-in), an ImageFolder directory or a labels "
                                                     "table (train.csv)."),
    profile: str | None = options.profile_option(),
    sets: list[str] | None = options.set_option(),
    image_size: int | None = options.image_size_option(),
    batch_size: str | None = options.batch_size_option(),
    max_workers: int | None = typer.Option(None, "--max-workers", min=0,
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
    shards: Path | None = typer.Option(None, "--shards", metavar="DST",
                                          help="A prepared set to compare (default: the sample is prepared into a "
                                               "temporary folder)."),
    write_profile: Path | None = typer.Option(None, "--write-profile",
                                                 help="Write a profile YAML (extends the one measured) with the "
                                                      "recommended loader settings."),
    as_json: bool = options.json_option(),
    out: Path | None = OutOpt,
) -> None:
    """Images/s the input pipeline delivers and the host RAM it holds, per num_workers x prefetch_factor, with
    the profile's batch and augmentation; the knee, the recommended setting within the RAM budget, and whether it
    keeps up with the model."""
    from fasttrain.bench import gather
    from fasttrain.bench import loader as bl
    from fasttrain.bench.loader_choice import profile_note
    from fasttrain.bench.remember import remember_loader
    from fasttrain.bench.results import save_result

    opts = bl.LoaderOptions(data, _prefetch_factors(prefetch), max_workers, rounds, batches, max_seconds,
                            None if model.lower() == "none" else model, paths, compare_images, shards)
    report, prof, ref = gather.setup(profile, sets, image_size)
    say = _say()
    bundle, plan, batch_msg = gather.loader_inputs(data, report, prof, batch_size, opts.model, say)
    run = bl.bench_loader(bundle, plan, prof, report.cores, opts, profile=ref, batch_message=batch_msg, progress=say)
    result = run.result
    if write_profile is not None:
        note = profile_note(data, plan.batch_size, plan.image_size, run.choice, run.why)
        bl.write_profile(write_profile, ref, run.choice, note)
        result["profile_written"] = str(write_profile)
    result["advice"] = remember_loader(run.points, run.choice, bundle.kind, plan, report)
    path = save_result("loader", out, result, report)
    if as_json:
        print_json(result)
        return
    claim = ""
    if result.get("speedup_over_0_workers"):
        from fasttrain.bench.claims import claims_text, load_claims
        _, claim = claims_text("workers", load_claims())
    bench_view.render_loader(result, run.points, run.knee, run.choice, claim, path, console())


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
