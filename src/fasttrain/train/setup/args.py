"""The arguments a run trains with: `fasttrain train`'s parameters (or fasttrain.train()'s keywords) as a TrainArgs,
checked, a resumed run's own arguments filled in, the flags that set profile values, and a run folder that can be
written.

--resume: the checkpoint's own arguments (model, data, profile, seed, ...) fill every flag not given again, so
`fasttrain train --resume runs/NAME` alone continues the same run (state/resume.py finds the checkpoint).
A torchrun worker (parallel/launch.py) drops the launch flags: torchrun already started it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.core.errors import Problem, UserError
from fasttrain.plan import check_image_size
from fasttrain.train.parallel.launch import check_spec, world_flags
from fasttrain.train.state.run_state import RESUMED_FIELDS, Resume
from fasttrain.train.types import LaunchSpec, TrainArgs, WorkerWorld, parse_batch_size

if TYPE_CHECKING:
    from fasttrain.core.given import GivenInputs

# `fasttrain train`'s parameters that are not a TrainArgs field of the same name: the launch flags (one LaunchSpec)
# and --json (TrainArgs.json: `json` is not a Python parameter name the command can take).
LAUNCH_PARAMS = ("nproc_per_node", "nnodes", "node_rank", "rdzv_endpoint", "rdzv_timeout")
RENAMED = {"as_json": "json"}
NOT_PARAMS = ("launch", "explicit", "inputs")  # TrainArgs fields no flag sets directly


def train_args(values: Mapping[str, Any], explicit: set[str] | None = None,
               inputs: GivenInputs | None = None) -> TrainArgs:
    """`fasttrain train`'s parameters, by the command's own parameter names, as a TrainArgs: the one place flags
    become fields, for the command (its parsed flags) and for fasttrain.train() (its keywords, checked against the
    same flags' types, defaults and checks: api/keywords.py). A parameter left out takes TrainArgs' default.
    `explicit`: the parameters given (they win over a resumed checkpoint's); `inputs`: the Python objects of an API
    call. A parameter with no field is a TypeError: a new flag needs its TrainArgs field (tests/test_api.py)."""
    fields = {f.name for f in dataclasses.fields(TrainArgs)} - set(NOT_PARAMS)
    unknown = sorted(set(values) - fields - set(RENAMED) - set(LAUNCH_PARAMS))
    if unknown:
        raise TypeError(f"train_args: no TrainArgs field for {unknown}")
    given = set(explicit or ())
    kw = {RENAMED.get(k, k): v for k, v in values.items() if k not in LAUNCH_PARAMS}
    kw["sets"] = list(kw.get("sets") or [])
    if kw.get("runs_dir") is not None:
        kw["runs_dir"] = Path(kw["runs_dir"])
    if kw.get("batch_size") is not None:
        kw["batch_size"] = parse_batch_size(kw["batch_size"])
    if isinstance(kw.get("time_budget"), str):
        from fasttrain.train.setup.budget_args import parse_duration
        kw["time_budget"] = parse_duration(kw["time_budget"])
    return TrainArgs(**kw, launch=_launch_spec(values, given), explicit=given, inputs=inputs)


def _launch_spec(values: Mapping[str, Any], given: set[str]) -> LaunchSpec | None:
    """--nproc-per-node N [--nnodes M --node-rank R --rdzv-endpoint H:P --rdzv-timeout S] as one LaunchSpec."""
    multi = sorted(set(LAUNCH_PARAMS[1:]) & given)
    if values.get("nproc_per_node") is None:
        if multi:
            raise UserError([Problem("--" + multi[0].replace("_", "-"), "only means something with "
                                     "--nproc-per-node", "add --nproc-per-node N (processes on this machine)")])
        return None
    defaults = LaunchSpec(1)
    return LaunchSpec(values["nproc_per_node"], values.get("nnodes", defaults.nnodes),
                      values.get("node_rank", defaults.node_rank), values.get("rdzv_endpoint"),
                      values.get("rdzv_timeout", defaults.rdzv_timeout_s))


def final_args(args: TrainArgs, world: WorkerWorld | None) -> tuple[TrainArgs, Resume | None]:
    """The arguments this run trains with -> (args, the checkpoint to continue from or None).
    A resume takes every flag not given again from the checkpoint and trains in the checkpoint's folder; a
    torchrun worker drops the launch flags (torchrun already launched it). Bad values raise UserError."""
    resume = None
    if args.resume:
        from fasttrain.train.state.resume import find_checkpoint, with_saved_args
        resume, skipped = find_checkpoint(args.resume, args.runs_dir, args.run_name)
        args = replace(with_saved_args(args, resume, RESUMED_FIELDS),
                       runs_dir=resume.path.parent.parent, run_name=resume.path.parent.name)
        for bad in skipped:
            print(f"fasttrain: note: skipped damaged checkpoint {bad}", file=sys.stderr)
    _check_values(args)
    if args.launch is not None:
        _check_launch(args.launch, world)
        if world is not None:  # `torchrun ... -m fasttrain train --nproc-per-node N`: torchrun already launched
            args = replace(args, launch=None)
    return args, resume


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
    from fasttrain.train.loop.precision import ON_NAN_MODES
    if args.on_nan not in ON_NAN_MODES:
        raise UserError([Problem("--on-nan", f"must be one of {', '.join(ON_NAN_MODES)}", value=args.on_nan)])
    _check_budget(args)


def _check_budget(args: TrainArgs) -> None:
    """A budget's values (also a resumed run's saved ones); one budget at a time. Any launch: the ranks of a
    data-parallel job agree on the budget's stop and plan (loop/budget.py), counted from the launcher's start."""
    from datetime import datetime

    from fasttrain.train.setup.budget_args import deadline_seconds
    given = [f for f, v in (("--time-budget", args.time_budget), ("--deadline", args.deadline),
                            ("--max-cost", args.max_cost)) if v is not None]
    if len(given) > 1:
        raise UserError([Problem(given[1], f"only one budget at a time: {given[0]} is given too",
                                 f"keep one of {', '.join(given)}")])
    if args.deadline is not None:
        deadline_seconds(args.deadline, datetime.now())  # its format
    for flag, value in (("--time-budget", args.time_budget), ("--max-cost", args.max_cost)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            raise UserError([Problem(flag, "must be a positive number", value=value)])


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
    if isinstance(args.batch_size, int):  # "auto" is searched (setup/batch_search.py), then resolved
        flags["loader.batch_size"] = ("--batch-size", args.batch_size)
    if args.no_last:
        flags["checkpoint.save_last"] = ("--no-last", False)
    return flags


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
            with contextlib.suppress(OSError):
                folder.rmdir()


def _check_launch(spec: LaunchSpec, world: WorkerWorld | None) -> None:
    check_spec(spec)
    if world is not None and (spec.nproc_per_node, spec.nnodes) != (world.local_world_size, world.nodes):
        raise UserError([Problem("--nproc-per-node", f"this process is a torchrun worker of a job of {world.nodes} "
                                 f"node(s) x {world.local_world_size} processes, not {spec.nnodes} x "
                                 f"{spec.nproc_per_node}", "drop the launch flags under torchrun",
                                 spec.nproc_per_node)])
