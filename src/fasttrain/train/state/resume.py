"""`--resume`: find the checkpoint, bring back the run's arguments, refuse what cannot continue exactly.

`--resume runs/NAME` takes the newest checkpoint of that folder and insists it loads (a damaged one is an
exit-2 error that names it and the previous good one). `--resume FILE` takes that file. `--resume auto` takes
the furthest checkpoint that loads, of `--run-name` when given, else of the run in --runs-dir that got furthest;
"furthest" is the optimizer step (then epoch, batch) recorded inside the files, never their mtime (a `cp -r`
changes those). Damaged ones on the way are skipped and named.
"""
from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.core.errors import Problem, UserError
from fasttrain.train.state.checkpoint import (
    NO_CHECKSUM,
    candidates,
    load,
    peek_position,
    ranked_by_position,
    resume_points,
    weights_only,
)
from fasttrain.train.state.run_state import Position, Resume, RunState

if TYPE_CHECKING:
    from fasttrain.datasets.sampler import EpochSampler
    from fasttrain.plan import Plan
    from fasttrain.train.types import TrainArgs


def find_checkpoint(spec: str, runs_dir: Path, run_name: str | None) -> tuple[Resume, list[Path]]:
    """-> (the checkpoint to continue from, damaged checkpoints skipped on the way). Checked: readable,
    checksum, field types, every field a resume needs present. An older file without a checksum loads with a
    note on stderr."""
    if spec != "auto":
        path = Path(spec)
        if not path.exists():  # neither a run folder nor a file: say which runs there are
            raise UserError([Problem("--resume", "no run folder or checkpoint file there", _runs_hint(runs_dir),
                                     spec)])
        if path.is_dir():
            found = candidates(path)
            if not found:
                raise _kept_no_last(path, spec) or UserError([Problem(
                    "--resume", f"no checkpoint (*.pt) in {path}", "give a run folder that holds last.pt, or a "
                    "checkpoint file", spec)])
            path = found[0]
        elif weights_only(path):
            raise UserError([Problem("--resume", f"{path} holds the best weights only (for using the model), not "
                                     "a point a run can continue from", f"resume from {path.parent / 'last.pt'}",
                                     spec)])
        return _resume(path, load(path, complete=True)), []
    runs_dir = Path(runs_dir)
    folder = runs_dir / run_name if run_name else latest_run(runs_dir)
    ranked = _ranked(folder) if folder is not None else []
    skipped = [p for p in ranked if peek_position(p) is None]  # damaged beyond reading: named even when not reached
    for path in (p for p in ranked if p not in skipped):
        try:
            return _resume(path, load(path, hint=False, complete=True)), skipped
        except UserError:
            skipped.append(path)
    where = folder if folder is not None else runs_dir
    if folder is not None and not ranked and (kept := _kept_no_last(folder, spec)) is not None:
        raise kept
    raise UserError([Problem("--resume auto", f"no loadable checkpoint in {where}"
                             + (f" (damaged: {', '.join(str(p) for p in skipped)})" if skipped else ""),
                             "start a new run without --resume, or name a checkpoint file")])


def _kept_no_last(folder: Path, spec: str) -> UserError | None:
    """The refusal for a run folder trained with checkpoint.save_last false (its profile.yaml says so), else None."""
    import yaml
    try:
        profile = yaml.safe_load((Path(folder) / "profile.yaml").read_text())
        keep_last = profile["checkpoint"]["save_last"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None
    if keep_last is not False:
        return None
    return UserError([Problem("--resume", f"{folder} was trained with checkpoint.save_last: false (--no-last): it "
                              "kept no last.pt and cannot be resumed", f"start a new run from its weights: fasttrain "
                              f"train --weights {folder}", spec)])


def check_keep_last(args: TrainArgs, keep_last: bool, resume: Resume | None) -> None:
    """checkpoint.save_last false (--no-last) keeps no resume point: refused beside what would make or use one."""
    if keep_last:
        return
    why = "--no-last" if args.no_last else "checkpoint.save_last: false"
    if resume is not None:
        raise UserError([Problem("--resume", f"continues a run that keeps last.pt; {why} would leave it behind the "
                                 "run", f"drop {why}")])
    for flag, value in (("--save-every", args.save_every), ("--save-every-minutes", args.save_every_minutes)):
        if value is not None:
            raise UserError([Problem(flag, f"keeps checkpoints a run resumes from; {why} is for a run that keeps "
                                     "none", f"drop {flag} or {why}", value)])


def _runs_hint(runs_dir: Path) -> str:
    """The newest run folders under --runs-dir, to pick from (or how to find one)."""
    runs_dir = Path(runs_dir)
    found = sorted((d for d in runs_dir.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime,
                   reverse=True)[:3] if runs_dir.is_dir() else []
    if not found:
        return f"no run folders in {runs_dir}; give the folder a run printed at its end (`run folder`)"
    return "runs here, newest first: " + ", ".join(str(d) for d in found) + " (or --resume auto: the furthest)"


def _ranked(folder: Path) -> list[Path]:
    """A run's checkpoints by the position recorded inside them, furthest first (last.pt wins a tie)."""
    return ranked_by_position(resume_points(folder))


def latest_run(runs_dir: Path) -> Path | None:
    """The run folder whose checkpoints got furthest (optimizer step, then epoch and batch, recorded inside the
    files, never their mtime); ties go to the later name (default names start with the date)."""
    best: tuple[Position, str] | None = None
    found = None
    for folder in (d for d in Path(runs_dir).iterdir() if d.is_dir()) if Path(runs_dir).is_dir() else []:
        points = resume_points(folder)
        positions = [pos for pos in map(peek_position, points) if pos is not None]
        if not positions and not points:
            continue
        key = (max(positions) if positions else Position(-2, -2, -2), folder.name)
        if best is None or key > best:
            best, found = key, folder
    return found


def _resume(path: Path, payload: dict[str, Any]) -> Resume:
    if payload.get("checksum_note") == NO_CHECKSUM:
        print(f"fasttrain: note: {path} has no checksum (written by an older fasttrain): loaded without verifying "
              "its content", file=sys.stderr)
    return Resume(path, RunState.from_payload(payload))


def with_saved_args(args: TrainArgs, resume: Resume, fields: Sequence[str]) -> TrainArgs:
    """A copy of `args` where every field of `fields` not given on this command line (args.explicit) comes from
    the checkpoint's saved arguments."""
    saved = resume.state.extras.args or {}
    taken = {name: saved[name] for name in fields if name in saved and name not in args.explicit}
    for name, value in taken.items():
        want = _ARG_TYPES.get(name)
        if want is not None and (not isinstance(value, want) or (isinstance(value, bool) and bool not in want)):
            raise UserError([Problem(str(resume.path), f"not a usable checkpoint: field "
                                     f"'args.{name}' should be {' or '.join(t.__name__ for t in want)}, found "
                                     f"{type(value).__name__} {str(value)[:40]!r}", f"give --{name.replace('_', '-')} "
                                     "on the command line, or resume from another checkpoint")])
    if taken.get("batch_size") is not None:  # saved as typed (int or "auto"), or as text by an older fasttrain
        from fasttrain.train.types import parse_batch_size
        taken["batch_size"] = parse_batch_size(taken["batch_size"])
    return dataclasses.replace(args, **taken)


_NONE = type(None)
# The types a checkpoint's saved arguments must have (TrainArgs' fields of the same names).
_ARG_TYPES: dict[str, tuple[type, ...]] = {
    "profile": (str, _NONE), "model": (str, _NONE), "data": (str,), "epochs": (int, _NONE), "sets": (list,),
    "pretrained": (bool,), "weights": (str, _NONE), "seed": (int,), "image_size": (int, _NONE),
    "num_classes": (int, _NONE),
    "save_every": (int, _NONE), "strict_data": (bool,), "on_nan": (str,), "save_every_minutes": (int, float, _NONE),
    "batch_size": (int, str, _NONE), "time_budget": (int, float, _NONE), "deadline": (str, _NONE),
    "max_cost": (int, float, _NONE)}


def check_resumable(resume: Resume, plan: Plan, epochs: int) -> None:
    """The batch decides where inside an epoch the run stands; a finished run has nothing left to do."""
    saved, path = resume.state.extras.plan, resume.path
    checks = (("batch_size", "loader.batch_size", "resume without changing loader.batch_size"),
              ("accumulation_steps", "optim.accumulation_steps", "resume without changing optim.accumulation_steps"),
              ("world_size", "world size", "start it with the same --nproc-per-node and --nnodes as the run that "
               "wrote it"))
    for key, label, fix in checks:
        if key in saved and saved[key] != getattr(plan, key):
            raise UserError([Problem(str(path), f"was written with {label} {saved[key]}, this run would use "
                                     f"{getattr(plan, key)}: the position inside the epoch and the LR schedule "
                                     "would not match", fix, getattr(plan, key))])
    at = resume.state.position
    if at.epoch >= epochs and at.batch == 0:
        raise UserError([Problem(str(path), f"the run already finished epoch {at.epoch} of {epochs}",
                                 f"train further with --epochs {at.epoch + 1} or more (the LR schedule then "
                                 "stretches to the new length)")])


def restore_sampler(sampler: EpochSampler, resume: Resume) -> None:
    """The data order a resumed run continues with: its checkpoint's, or a UserError when the data changed."""
    state = resume.state.extras.sampler
    if state is None:
        return
    try:
        sampler.load_state_dict(state)
    except (ValueError, KeyError) as exc:
        raise UserError([Problem(str(resume.path), f"its data order does not fit this data: {exc}",
                                 "resume with the same --data as the run that wrote it")]) from exc
