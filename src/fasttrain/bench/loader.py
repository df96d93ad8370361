"""`bench loader`: images/s the input pipeline delivers and host RAM it holds, per num_workers x prefetch_factor.

The field notes found their starved GPU by watching htop and guessed "more workers 1.5x". This sweeps the
worker count (0 up to the cores, and one step beyond to show where more stop helping) and prefetch_factor
with the profile's batch, image size and augmentation, through the same loaders `train` builds
(datasets.build_datasets + loaders.build_loaders). Settings run in interleaved rounds (medians of images/s;
the machine is noisy). RAM: RSS summed over the main process and its workers, sampled on a thread while
batches flow, and PSS summed once at the end of the timed window. Workers are forked copies sharing the
parent's pages, so the RSS sum counts the shared libraries once per worker; PSS splits shared pages between the processes that map them, so the PSS
sum is what the machine really gives up, and it is what the RAM budget is checked against.

The pure parts are bench/loader_sweep.py (the settings, each one's points over rounds) and bench/loader_choice.py
(knee, recommendation, keeping up, profile YAML), tested on recorded sweeps; bench/ram.py reads the RAM.
"""
from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fasttrain.bench.loader_choice import profile_yaml
from fasttrain.bench.loader_sweep import Point, Setting
from fasttrain.bench.ram import RamSampler, pss_of
from fasttrain.bench.rounds import rotated
from fasttrain.core.format import fmt_bytes


def forecast_rate(profile: Any, model_name: str, *, num_classes: int, dataset_size: int) -> tuple[float, str] | None:
    """estimate's forecast of training images/s on the GPU the profile names, for when this machine has no GPU
    (the loader measured here must keep up with *that* GPU). None when estimate cannot forecast it."""
    if not profile.hardware.gpu:
        return None
    try:
        from fasttrain.estimate import gather as eg

        req = eg.Request(model_name, num_classes, dataset_size, "bench loader", None, None, [], None, None)
        fc, _ = eg.forecast_for(profile, req, None)
    except Exception:  # noqa: BLE001 - a forecast is optional: fall back to measuring here
        return None
    rate = fc.speed.get("images_per_s")
    if not rate:
        return None
    return float(rate), f"estimate's forecast for {fc.device.get('name') or profile.hardware.gpu}"


def measure_setting(bundle: Any, plan: Any, setting: Setting, *, batches: int, max_seconds: float,
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
        timed = 0
        for batch in it:
            images += int(batch[1].shape[0])
            timed += 1
            if timed >= batches or time.perf_counter() - first > max_seconds:
                break
        elapsed = time.perf_counter() - first
        loaded_pss = ram.pss_now()  # workers alive, prefetch queues full: the loader's steady-state RAM
        del it  # shuts the workers down
    return {"workers": setting.workers, "prefetch": setting.prefetch, "images_per_s": images / max(elapsed, 1e-9),
            "ram_bytes": max(0, loaded_pss - idle_pss), "rss_bytes": ram.peak_rss, "startup_s": first - started,
            "batches": timed}


def sweep(bundle: Any, plan: Any, settings: list[Setting], *, rounds: int, batches: int, max_seconds: float,
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


def training_rate(plan: Any, model_name: str, *, image_size: int, num_classes: int, steps: int = 3,
                  warmup_steps: int = 1) -> float:
    """Images/s the model trains at on inputs already on the device (the same step code as `train`)."""
    from fasttrain.models.registry import create_model
    from fasttrain.train.synthetic import run_synthetic_steps

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
