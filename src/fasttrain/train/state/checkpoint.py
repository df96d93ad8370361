"""Checkpoints written atomically and checked on load.

Write: a temporary file in the same directory, flushed and fsynced, then os.replace() over the old name (atomic on
POSIX within one file system), then the directory is fsynced so the rename survives a power cut. A reader therefore
sees the old checkpoint or the new one, never half of one. Content is everything an exact resume needs: model,
optimizer, GradScaler, LR schedule, epoch and batch inside it, sampler state, RNG states (rng.py), the resolved
profile and versions. A save that fails (a full disk: ENOSPC) leaves the previous file in place; CheckpointPolicy
(checkpoint_policy.py: which files a run keeps) says so and the run goes on. Stale temporary files (a process
killed mid-save) are removed after the next good save.
Every file carries a SHA-256 of its content (integrity.py); load() verifies it and the types of the fields a resume
reads, so a flipped byte or an edited field is refused like a truncated file, naming the previous good checkpoint.
An entry kept once in model.safetensors (models/saved.py: a reference and that file's SHA-256) is read from there.
Runs and files are ranked by the position recorded inside them, never by mtime. Test hook:
FASTTRAIN_TEST_SLOW_SAVE=seconds (checked when a CheckpointPolicy is made: a bad value is an exit-2 error) sleeps
before the rename that replaces a checkpoint, so a test can kill the process in that window.
"""
from __future__ import annotations

import contextlib
import math
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from fasttrain.core.errors import Problem, UserError
from fasttrain.models import saved
from fasttrain.train.state.integrity import NO_CHECKSUM, schema_problem, to_host, verify_checksum, with_checksum
from fasttrain.train.state.run_state import Position

FORMAT = "fasttrain-checkpoint"
FORMAT_VERSION = 1


def versions() -> dict[str, str]:
    from fasttrain import __version__
    return {"fasttrain": __version__, "torch": str(torch.__version__)}  # a plain str: torch.load(weights_only) opens it


def save_atomic(payload: dict[str, Any], path: Path, *, slow_save_s: float = 0.0) -> Path:
    """torch.save to `path` atomically (see module docstring), with its checksum. Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = with_checksum(to_host({"format": FORMAT, "format_version": FORMAT_VERSION, "versions": versions(),
                                     **payload}))  # one copy to the host, hashed and saved from there
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        if slow_save_s and path.exists():
            time.sleep(slow_save_s)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def test_slow_save_seconds() -> float:
    """FASTTRAIN_TEST_SLOW_SAVE (a test hook, see module docstring): 0 when unset; a bad value is a UserError."""
    text = os.environ.get("FASTTRAIN_TEST_SLOW_SAVE", "").strip()
    if not text:
        return 0.0
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not math.isfinite(seconds) or seconds < 0:
        raise UserError([Problem("FASTTRAIN_TEST_SLOW_SAVE", "must be a number of seconds, 0 or more (a test hook)",
                                 "unset it", text)])
    return seconds


def prune_stale_temporaries(directory: Path, max_age_s: float = 0.0) -> list[Path]:
    """Remove `.NAME.pt.*.tmp` (and model.safetensors') files left by a process killed mid-save (older than
    `max_age_s`)."""
    removed = []
    now = time.time()
    for tmp in [*Path(directory).glob(".*.pt.*.tmp"), *Path(directory).glob(".model.safetensors.*.tmp")]:
        try:
            if now - tmp.stat().st_mtime >= max_age_s:
                tmp.unlink()
                removed.append(tmp)
        except OSError:
            pass
    return removed


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory; the rename is still atomic
    finally:
        os.close(fd)


def load(path: Path, *, hint: bool = True, complete: bool = False) -> dict[str, Any]:
    """Read and check a checkpoint; a missing, truncated, corrupt (checksum) or foreign file, or one whose fields
    have the wrong types (with `complete`: or are missing), is a UserError naming it and the field (and, with
    `hint`, the previous good checkpoint of its folder). payload["checksum_note"]: NO_CHECKSUM for a file
    written before checksums, else None."""
    path = Path(path)
    def why(text: str) -> UserError:
        return UserError([Problem(str(path), text, _previous_hint(path, complete) if hint else "")])
    if not path.is_file():
        raise why("no such checkpoint file")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:
        raise why(f"not a readable checkpoint (truncated or corrupt?): {type(exc).__name__}") from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise why("not a fasttrain checkpoint" + ("" if isinstance(payload, dict) else
                                                  f" (it holds a {type(payload).__name__}, not a dict)"))
    version = payload.get("format_version", 0)
    if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
        raise UserError([Problem(str(path), f"written by a newer fasttrain (format {payload['format_version']})",
                                 "upgrade fasttrain to load it")])
    bad_sum = verify_checksum(payload)
    if bad_sum is not None and bad_sum != NO_CHECKSUM:
        raise why(bad_sum)
    bad_field = schema_problem(payload, complete) or saved.resolve_references(payload, path.parent)
    if bad_field is not None:
        raise why(f"not a usable checkpoint: {bad_field}")
    payload["checksum_note"] = bad_sum
    return payload


@contextlib.contextmanager
def fitting_this_run(path: Path, model: torch.nn.Module, weights: object) -> Iterator[None]:
    """Around loading checkpoint `path`'s state into this run (StepEngine.load_state_dict): weights that do not fit
    `model` (checked first, every differing tensor named) or an optimizer state that does not fit the run's
    optimizer are a UserError naming the file and the fix."""
    if not isinstance(weights, dict):
        raise UserError([Problem(str(path), "the checkpoint holds no model weights")])
    own = model.state_dict()
    problems = [f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}"
                for k, v in weights.items() if k in own and hasattr(v, "shape") and v.shape != own[k].shape]
    missing, unexpected = sorted(set(own) - set(weights)), sorted(set(weights) - set(own))
    if problems or missing or unexpected:
        detail = "; ".join(problems[:3] + [f"missing {k}" for k in missing[:2]] +
                           [f"unexpected {k}" for k in unexpected[:2]])
        raise UserError([Problem(str(path), f"the checkpoint does not fit this model ({detail})",
                                 "use the same --model and --num-classes as the run that wrote it")])
    try:
        yield
    except (KeyError, ValueError, TypeError) as exc:  # what torch's Optimizer.load_state_dict raises
        raise UserError([Problem(str(path), f"its optimizer state does not fit this run ({exc})",
                                 "resume with the same optim.optimizer as the run that wrote it")]) from exc


def load_model_state(model: torch.nn.Module, state: dict[str, Any] | None, path: Path) -> None:
    """Copy weights (a checkpoint's "model") into `model`, refusing (with every differing tensor named) when shapes
    or names do not match."""
    with fitting_this_run(path, model, state):
        model.load_state_dict(state or {})


def peek_position(path: Path) -> Position | None:
    """The position recorded in a checkpoint, read without verifying it (tensors are memory-mapped, not read);
    None when the file does not open. Ranks files; load() then checks the one chosen."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    except Exception:
        try:
            payload = torch.load(path, map_location="cpu", weights_only=False)
        except Exception:
            return None
    return Position.of(payload) if isinstance(payload, dict) and payload.get("format") == FORMAT else None


def candidates(directory: Path) -> list[Path]:
    """Checkpoint files of a run folder: last.pt (where the run stands) first, then the others by the position
    recorded inside them, furthest first (ties: last.pt, then by name); files that do not open come last."""
    if not Path(directory).is_dir():
        return []
    files = resume_points(directory)
    last = [p for p in files if p.name == "last.pt"]
    ranked = ranked_by_position(p for p in files if p.name != "last.pt")
    return last + ranked


def resume_points(folder: Path) -> list[Path]:
    """The checkpoint files of a run folder a run can continue from (best.pt holds weights only)."""
    if not Path(folder).is_dir():
        return []
    return [p for p in Path(folder).glob("*.pt") if p.is_file() and not weights_only(p)]


def weights_only(path: Path) -> bool:
    """A best.pt-style file: the weights for using the model, not a point a run can resume from."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        return False
    return isinstance(payload, dict) and payload.get("kind") == WEIGHTS_KIND


def ranked_by_position(files: Iterable[Path]) -> list[Path]:
    """Files sorted by recorded position, furthest first; ties: last.pt, then the later name; unreadable last."""
    keyed = [(peek_position(p), p) for p in files]
    good = sorted(((pos, p) for pos, p in keyed if pos is not None),
                  key=lambda e: (e[0], e[1].name == "last.pt", e[1].name), reverse=True)
    return [p for _, p in good] + sorted(p for pos, p in keyed if pos is None)


def previous_good(path: Path, complete: bool = False) -> Path | None:
    """The furthest other checkpoint in `path`'s folder that loads, or None."""
    for other in ranked_by_position(resume_points(Path(path).parent)):
        if other.resolve() == Path(path).resolve():
            continue
        try:
            load(other, hint=False, complete=complete)
        except UserError:
            continue
        return other
    return None


def _previous_hint(path: Path, complete: bool = False) -> str:
    good = previous_good(path, complete)
    return f"the previous good checkpoint is {good} (resume from it with --resume {good})" if good else \
        "no other good checkpoint in that folder"


WEIGHTS_KIND = "weights"   # a checkpoint's "kind" when it holds weights only (best.pt): not a resume point
