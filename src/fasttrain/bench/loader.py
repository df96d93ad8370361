"""`bench loader`: images/s the input pipeline delivers and host RAM it holds, per num_workers x prefetch_factor.

The field notes found their starved GPU by watching htop and guessed "more workers 1.5x". This sweeps the
worker count (0 up to the cores, and one step beyond to show where more stop helping) and prefetch_factor
with the profile's batch, image size and augmentation, through the same loaders `train` builds
(datasets.build_datasets + loaders.build_loaders). Settings run in interleaved rounds (medians of images/s;
the machine is noisy). RAM: RSS summed over the main process and its workers, sampled on a thread while
batches flow, and PSS summed once at the end of the timed window. Workers are forked copies sharing the
parent's pages, so the RSS sum counts the shared libraries once per worker; PSS splits shared pages between the
processes that map them, so the PSS
sum is what the machine really gives up, and it is what the RAM budget is checked against.

The pure parts are bench/loader_sweep.py (the settings, each one's points over rounds) and bench/loader_choice.py
(knee, recommendation, keeping up, profile YAML), tested on recorded sweeps; bench/ram.py reads the RAM.
"""
from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.bench.loader_choice import find_knee, keeps_up, profile_yaml, recommend, summary
from fasttrain.bench.loader_sweep import Point, Setting, combine_rounds, sweep_settings, worker_counts
from fasttrain.bench.ram import RamSampler, pss_of
from fasttrain.bench.rounds import rotated
from fasttrain.core.format import fmt_bytes

if TYPE_CHECKING:
    from fasttrain.datasets.bundle import DataBundle
    from fasttrain.plan import Plan
    from fasttrain.profiles.schema import Profile


@dataclass(frozen=True)
class LoaderOptions:
    """`bench loader`'s flags, checked: what to sweep, how long, and what to compare."""

    data: str                   # shapes or an image folder
    prefetch: tuple[int, ...]   # prefetch_factor values
    max_workers: int | None     # None: the cores and one step past them
    rounds: int
    batches: int                # timed batches per setting per round
    max_seconds: float          # time cap per setting per round
    model: str | None           # the model the loader must keep up with; None: --model none
    paths: bool                 # also compare input paths on a sample of the files
    compare_images: int
    shards: Path | None         # a prepared set to compare


@dataclass
class LoaderBench:
    """What `bench loader` measured: the result dict (stable keys), the points, the knee and the recommendation."""

    result: dict[str, Any]
    points: list[Point]
    knee: Point
    choice: Point
    why: str


def bench_loader(bundle: DataBundle, plan: Plan, prof: Profile, cores: int, opts: LoaderOptions, *, profile: str,
                 batch_message: str | None, progress: Callable[[str], None]) -> LoaderBench:
    """Sweep the settings in interleaved rounds, choose, check the choice keeps up with the model, and (opts.paths)
    compare the input paths with the chosen worker count."""
    settings = sweep_settings(worker_counts(cores, opts.max_workers), opts.prefetch)
    progress(f"{len(settings)} settings x {opts.rounds} rounds on {bundle.train_size} images ({opts.data}), batch "
             f"{plan.batch_size}, {plan.image_size} px")
    samples = sweep(bundle, plan, settings, rounds=opts.rounds, batches=opts.batches, max_seconds=opts.max_seconds,
                    progress=progress)
    points = combine_rounds(samples)
    knee = find_knee(points)
    choice, why = recommend(points, plan.ram_budget_bytes)
    train_rate, source = training_rate_to_match(prof, plan, opts.model, bundle, progress)
    up = keeps_up(choice.images_per_s, train_rate, cpu_only=plan.device != "cuda", source=source)
    result = summary(points, samples, plan, choice, why, knee, up, data=opts.data, profile=profile, cores=cores,
                     rounds=opts.rounds, batches=opts.batches, model=opts.model, batch_message=batch_message)
    if opts.paths:
        from fasttrain.bench.paths import compare_paths

        compared = compare_paths(bundle, opts.data, augment=prof.augment, image_size=plan.image_size,
                                 batch_size=plan.batch_size, workers=choice.workers, images=opts.compare_images,
                                 rounds=opts.rounds, max_seconds=opts.max_seconds, train_rate=train_rate,
                                 shards=opts.shards, progress=progress)
        result.update(paths=compared["paths"], paths_recommendation=compared["recommendation"],
                      paths_sample_images=compared["sample_images"], paths_workers=compared["workers"])
    return LoaderBench(result, points, knee, choice, why)


def training_rate_to_match(prof: Profile, plan: Plan, train_model: str | None, bundle: DataBundle,
                           say: Callable[[str], None]) -> tuple[float | None, str]:
    """(training images/s the loader must keep up with, where it comes from): estimate's forecast for the
    profile's GPU when this machine has none, else measured here; (None, ...) with --model none."""
    train_rate, source = None, "measured here"
    forecast = None
    if train_model is not None and plan.device != "cuda":  # the profile's GPU is not here: forecast it
        forecast = forecast_rate(prof, train_model, num_classes=bundle.num_classes, dataset_size=bundle.train_size)
    if forecast is not None:
        train_rate, source = forecast
    elif train_model is not None:
        say(f"measuring the training rate of {train_model} (synthetic inputs, same step code as train)")
        train_rate = training_rate(plan, train_model, image_size=plan.image_size, num_classes=bundle.num_classes)
        if prof.hardware.gpu and plan.device != "cuda":
            source = f"measured on this CPU; no forecast for the profile's {prof.hardware.gpu}"
    return train_rate, source


def forecast_rate(profile: Profile, model_name: str, *, num_classes: int,
                  dataset_size: int) -> tuple[float, str] | None:
    """estimate's forecast of training images/s on the GPU the profile names, for when this machine has no GPU
    (the loader measured here must keep up with *that* GPU). None when estimate cannot forecast it."""
    if not profile.hardware.gpu:
        return None
    try:
        from fasttrain.estimate import gather as eg

        req = eg.Request(model_name, num_classes, dataset_size, "bench loader", None, None, [], None, None)
        fc, _ = eg.forecast_for(profile, req, None)
    except Exception:
        return None
    rate = fc.speed.get("images_per_s")
    if not rate:
        return None
    return float(rate), f"estimate's forecast for {fc.device.get('name') or profile.hardware.gpu}"


def measure_setting(bundle: DataBundle, plan: Plan, setting: Setting, *, batches: int, max_seconds: float,
                    seed: int = 0) -> dict[str, Any]:
    """Start a fresh train loader with this setting, wait for the first batch (start-up), then time up to
    `batches` more (or `max_seconds`). Non-persistent workers: each setting starts and stops its own."""
    import psutil

    from fasttrain.datasets.loaders import build_loaders

    p = dataclasses.replace(plan, workers=setting.workers, prefetch_factor=setting.prefetch,
                            persistent_workers=False)
    idle_pss = pss_of(psutil.Process())
    images = 0
    with warnings.catch_warnings(), RamSampler() as ram:
        # torch warns when workers outnumber the cores; the sweep goes one step past them on purpose
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        train, _ = build_loaders(bundle, p, seed=seed)
        started = time.perf_counter()
        it = iter(train)
        next(it)
        first = time.perf_counter()
        ram.sample()  # the workers are up: a run shorter than the sampler's interval still counts them
        timed = 0
        for batch in it:
            images += int(batch[1].shape[0])
            timed += 1
            if timed >= batches or time.perf_counter() - first > max_seconds:
                break
        elapsed = time.perf_counter() - first
        ram.sample()
        loaded_pss = ram.pss_now()  # workers alive, prefetch queues full: the loader's steady-state RAM
        del it  # shuts the workers down
    return {"workers": setting.workers, "prefetch": setting.prefetch, "images_per_s": images / max(elapsed, 1e-9),
            "ram_bytes": max(0, loaded_pss - idle_pss), "rss_bytes": ram.peak_rss, "startup_s": first - started,
            "batches": timed}


def sweep(bundle: DataBundle, plan: Plan, settings: list[Setting], *, rounds: int, batches: int, max_seconds: float,
          progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Every setting once per round; the order rotates each round."""
    samples = []
    for r in range(rounds):
        for s in rotated(settings, r, step=max(1, len(settings) // max(1, rounds))):
            row = measure_setting(bundle, plan, s, batches=batches, max_seconds=max_seconds)
            row["round"] = r
            samples.append(row)
            if progress is not None:
                progress(f"round {r + 1}/{rounds} {s.label}: {row['images_per_s']:.0f} img/s, "
                         f"RAM {fmt_bytes(row['ram_bytes'])}")
    return samples


def training_rate(plan: Plan, model_name: str, *, image_size: int, num_classes: int, steps: int = 3,
                  warmup_steps: int = 1) -> float:
    """Images/s the model trains at on inputs already on the device (the same step code as `train`)."""
    from fasttrain.models.registry import create_model
    from fasttrain.train.loop.synthetic import run_synthetic_steps

    model = create_model(model_name, num_classes)
    return run_synthetic_steps(plan, model, image_size=image_size, num_classes=num_classes, steps=steps,
                               warmup_steps=warmup_steps)["images_per_s"]


def write_profile(path: Path, extends: str, choice: Point, note: str) -> None:
    """Write the profile and check it resolves (presets.resolve) before leaving it on disk."""
    from fasttrain.profiles import presets

    path = Path(path)
    if Path(extends).suffix in (".yaml", ".yml") and not Path(extends).is_absolute():
        extends = str(Path(extends).resolve())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(profile_yaml(extends, choice, note))
    try:
        presets.resolve(str(path), env={})
    except Exception:
        path.unlink(missing_ok=True)
        raise
