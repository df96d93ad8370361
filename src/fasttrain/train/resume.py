"""`--resume`: find the checkpoint, bring back the run's arguments, refuse what cannot continue exactly.

`--resume runs/NAME` takes the newest checkpoint of that folder and insists it loads (a damaged one is an
exit-2 error that names it and the previous good one). `--resume FILE` takes that file. `--resume auto` takes
the newest checkpoint that loads, of `--run-name` when given, else of the most recent run in --runs-dir;
damaged ones on the way are skipped and named.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fasttrain.train.checkpoint import candidates, load
from fasttrain.core.errors import Problem, UserError


def find_checkpoint(spec: str, runs_dir: Path, run_name: str | None) -> tuple[Path, dict[str, Any], list[Path]]:
    """-> (checkpoint path, its checked payload, damaged checkpoints skipped on the way)."""
    if spec != "auto":
        path = Path(spec)
        if path.is_dir():
            found = candidates(path)
            if not found:
                raise UserError([Problem("--resume", f"no checkpoint (*.pt) in {path}",
                                         "give a run folder that holds last.pt, or a checkpoint file", spec)])
            path = found[0]
        return path, load(path), []
    runs_dir = Path(runs_dir)
    if run_name:
        folders = [runs_dir / run_name]
    else:
        folders = sorted((d for d in runs_dir.iterdir() if d.is_dir() and candidates(d)),
                         key=lambda d: candidates(d)[0].stat().st_mtime_ns, reverse=True) if runs_dir.is_dir() else []
    skipped: list[Path] = []
    for folder in folders:
        for path in candidates(folder):
            try:
                return path, load(path, hint=False), skipped
            except UserError:
                skipped.append(path)
        if folders:
            break  # only the newest run: an older run is not "this" run
    where = folders[0] if folders else runs_dir
    raise UserError([Problem("--resume auto", f"no loadable checkpoint in {where}"
                             + (f" (damaged: {', '.join(str(p) for p in skipped)})" if skipped else ""),
                             "start a new run without --resume, or name a checkpoint file")])


def with_saved_args(args: Any, payload: dict[str, Any], fields: Sequence[str]) -> Any:
    """A copy of `args` (a dataclass) where every field of `fields` not given on this command line
    (args.explicit) comes from the checkpoint."""
    saved = payload.get("args") or {}
    return dataclasses.replace(args, **{name: saved[name] for name in fields
                                        if name in saved and name not in args.explicit})


def check_resumable(payload: dict[str, Any], path: Path, plan: Any, epochs: int) -> None:
    """The batch decides where inside an epoch the run stands; a finished run has nothing left to do."""
    saved = payload.get("plan") or {}
    checks = (("batch_size", "loader.batch_size", "resume without changing loader.batch_size"),
              ("accumulation_steps", "optim.accumulation_steps", "resume without changing optim.accumulation_steps"),
              ("world_size", "world size", "start it with the same --nproc-per-node and --nnodes as the run that "
               "wrote it"))
    for key, label, fix in checks:
        if key in saved and saved[key] != getattr(plan, key):
            raise UserError([Problem(str(path), f"was written with {label} {saved[key]}, this run would use "
                                     f"{getattr(plan, key)}: the position inside the epoch and the LR schedule "
                                     "would not match", fix, getattr(plan, key))])
    epoch, batch = int(payload.get("epoch", 0)), int(payload.get("batch_in_epoch", 0))
    if epoch >= epochs and batch == 0:
        raise UserError([Problem(str(path), f"the run already finished epoch {epoch} of {epochs}",
                                 f"train further with --epochs {epoch + 1} or more (the LR schedule then "
                                 "stretches to the new length)")])


def restore_sampler(sampler: Any, payload: dict[str, Any], path: Path) -> None:
    state = payload.get("sampler")
    if state is None:
        return
    try:
        sampler.load_state_dict(state)
    except (ValueError, KeyError) as exc:
        raise UserError([Problem(str(path), f"its data order does not fit this data: {exc}",
                                 "resume with the same --data as the run that wrote it")]) from exc
