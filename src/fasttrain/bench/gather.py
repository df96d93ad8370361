"""Gather for the `bench` commands: this machine and the resolved profile, --batch-size resolved (a number, or auto:
the batch `train --batch-size auto` would run), and what `bench loader` measures (the data set and the plan with
the batch to measure). All I/O; the benches' measuring is in their own modules."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from fasttrain.core.errors import Problem, UserError

if TYPE_CHECKING:
    from fasttrain.datasets.bundle import DataBundle
    from fasttrain.hardware.report import HardwareReport
    from fasttrain.plan import Plan
    from fasttrain.profiles.schema import OptimSpec, Profile


def setup(profile: str | None, sets: list[str] | None, image_size: int | None) -> tuple[HardwareReport, Profile, str]:
    """(HardwareReport, resolved Profile, profile ref) for this machine."""
    from fasttrain.hardware.machine import probe
    from fasttrain.profiles import presets

    if image_size is not None and image_size < 8:
        raise UserError([Problem("--image-size", "must be at least 8 pixels", value=image_size)])
    report = probe()
    if profile is None:
        from fasttrain.profiles.preset_match import best_preset

        profile = best_preset(report)
    flags = {"loader.image_size": ("--image-size", image_size)} if image_size is not None else None
    resolved = presets.resolve(profile, sets=sets or [], flags=flags)
    return report, resolved.profile, profile


def batch_option(value: str | None, plan: Plan, model: str, image_size: int, num_classes: int, optim: OptimSpec,
                 say: Callable[[str], None]) -> tuple[int | None, str | None]:
    """--batch-size: None (profile's), a number, or auto -> (batch, message). auto gives the batch `train
    --batch-size auto` would run: the largest that fits, capped at the profile's samples per optimizer step."""
    if value is None:
        return None, None
    from fasttrain.train.setup.batch_search import check_batch_option

    n = check_batch_option(value)
    if n is not None:
        return n, None
    from fasttrain.train.setup.batch_search import auto_batch

    say("--batch-size auto: searching the largest batch that fits (cached after the first run)")
    auto = auto_batch(plan, model, image_size, num_classes=num_classes, optim=optim)
    return auto.batch, auto.message


def loader_inputs(data: str, report: HardwareReport, prof: Profile, batch_size: str | None, train_model: str | None,
                  say: Callable[[str], None]) -> tuple[DataBundle, Plan, str | None]:
    """(dataset bundle, plan with the batch to measure, --batch-size auto message) for `bench loader`."""
    if data == "synthetic":
        raise UserError([Problem("--data", "synthetic data has no input pipeline to measure",
                                 "use shapes or an image directory", data)])
    from fasttrain.datasets.build import build_datasets
    from fasttrain.plan import make_plan

    bundle = build_datasets(data, image_size=prof.loader.image_size, augment=prof.augment, seed=0, table=prof.data)
    if bundle.kind != "images":
        raise UserError([Problem("--data", "bench loader measures image folders", "use shapes or a directory",
                                 data)])
    plan = make_plan(prof, report, dataset_size=bundle.train_size)
    batch, batch_msg = batch_option(batch_size, plan, train_model or "tiny_cnn", plan.image_size,
                                    bundle.num_classes, prof.optim, say)
    if batch is not None:
        import dataclasses
        plan = dataclasses.replace(plan, batch_size=batch)
    if plan.batch_size > bundle.train_size:
        raise UserError([Problem("loader.batch_size", f"larger than the {bundle.train_size} training images",
                                 "lower it with --batch-size", plan.batch_size)])
    return bundle, plan, batch_msg
