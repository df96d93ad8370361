"""Checkpoints written atomically and checked on load.

Write: a temporary file in the same directory, flushed and fsynced, then os.replace() over the old name (atomic on
POSIX within one file system), then the directory is fsynced so the rename survives a power cut. A reader therefore
sees the old checkpoint or the new one, never half of one. Content is everything an exact resume needs: model,
optimizer, GradScaler, LR schedule, epoch and batch inside it, sampler state, RNG states (rng.py), the resolved
profile and versions. A save that fails (a full disk: ENOSPC) leaves the previous file in place; CheckpointPolicy
says so and the run goes on. Stale temporary files (a process killed mid-save) are removed after the next good save.
Every file carries a SHA-256 of its content (integrity.py); load() verifies it and the types of the fields a resume
reads, so a flipped byte or an edited field is refused like a truncated file, naming the previous good checkpoint.
An entry kept once in model.safetensors (models/saved.py: a reference and that file's SHA-256) is read from there.
Runs and files are ranked by the position recorded inside them, never by mtime. Test hook:
FASTTRAIN_TEST_SLOW_SAVE=seconds (checked when a CheckpointPolicy is made: a bad value is an exit-2 error) sleeps
before the rename that replaces a checkpoint, so a test can kill the process in that window.
"""
from __future__ import annotations

import math
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from fasttrain.core.diskspace import disk_full, disk_write_error
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


def load_model_state(model: torch.nn.Module, state: dict[str, Any] | None, path: Path) -> None:
    """Copy weights (a checkpoint's "model"), refusing (with every differing tensor named) when shapes or names
    do not match."""
    if not isinstance(state, dict):
        raise UserError([Problem(str(path), "the checkpoint holds no model weights")])
    own = model.state_dict()
    problems = [f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}"
                for k, v in state.items() if k in own and hasattr(v, "shape") and v.shape != own[k].shape]
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    if problems or missing or unexpected:
        detail = "; ".join(problems[:3] + [f"missing {k}" for k in missing[:2]] + [f"unexpected {k}" for k in unexpected[:2]])
        raise UserError([Problem(str(path), f"the checkpoint does not fit this model ({detail})",
                                 "use the same --model and --num-classes as the run that wrote it")])
    model.load_state_dict(state)


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


class CheckpointPolicy:
    """The files a run keeps: last.pt (where the run stands: everything a resume needs; none with `keep_last`
    False), the model files (model.safetensors + model.json: the best weights, the run's one copy of them),
    epoch_N.pt every N epochs (`--save-every`, kept). When they are written is the loop's choice
    (train/loop/checkpointing.py). Each replaces its old file only once the new one is complete. A save that fails
    for lack of disk keeps the old file and adds a line to `errors` (the run goes on: losing a checkpoint is better
    than losing the run). `model_meta`: model.json's fields but the epoch's (train/run/export.py)."""

    def __init__(self, directory: Path, every_epochs: int | None = None, *, keep_last: bool = True,
                 model_meta: dict[str, Any] | None = None):
        self.directory = Path(directory)
        self.every_epochs = every_epochs
        self.keep_last = keep_last
        self.model_meta = model_meta
        self.errors: list[str] = []
        self.slow_save_s = test_slow_save_seconds()  # checked here, before training starts

    def _save(self, name: str, write: Callable[[Path], Path]) -> Path | None:
        path = self.directory / name
        try:
            written = write(path)
        except Exception as exc:
            if not disk_write_error(exc):
                raise
            full = disk_full(exc)
            cause = f"the disk is full ({full})" if full else str(exc).splitlines()[0][:200]
            kept = f"the previous {name} is kept" if path.is_file() else f"no {name} was written before"
            self.errors.append(f"could not save checkpoint {path}: {cause}; {kept}")
            return None
        prune_stale_temporaries(self.directory)
        return written

    def save_last(self, payload: dict[str, Any]) -> Path | None:
        if not self.keep_last:
            return None
        return self._save("last.pt", lambda path: save_atomic(payload, path, slow_save_s=self.slow_save_s))

    def save_model(self, weights: dict[str, Any]) -> Path | None:
        """The model files from a weights_payload(); a best.pt of an earlier fasttrain, superseded, is removed."""
        meta = None if self.model_meta is None else {**self.model_meta, "from": weights["from"],
                                                     "epoch": weights["epoch"], "val_acc1": weights["val_acc1"]}
        written = self._save(saved.WEIGHTS_FILE, lambda path: saved.save_trained(path.parent, weights["model"], meta))
        if written is not None:
            (self.directory / BEST_FILE).unlink(missing_ok=True)
        return written

    def numbered_due(self, epoch: int) -> bool:
        """--save-every N asks for epoch_N.pt after epoch `epoch` (0-based)."""
        return bool(self.every_epochs) and (epoch + 1) % (self.every_epochs or 1) == 0

    def save_numbered(self, payload: dict[str, Any], epoch: int) -> Path | None:
        """epoch_N.pt after epoch `epoch` (0-based) when --save-every N asks for it; else None."""
        if not self.numbered_due(epoch):
            return None
        return self._save(f"epoch_{epoch + 1:04d}.pt", lambda path: save_atomic(payload, path,
                                                                                slow_save_s=self.slow_save_s))


BEST_FILE = "best.pt"        # the best weights as an earlier fasttrain kept them (model.safetensors now)
WEIGHTS_KIND = "weights"   # a checkpoint's "kind" when it holds weights only (best.pt): not a resume point


def weights_payload(model: dict[str, Any], *, epoch: int, val_acc1: float | None,
                    best: bool = True) -> dict[str, Any]:
    """Weights for the model files (`best`: of the best epoch; else the last, when no epoch was validated); as
    best.pt held them, a file plain `torch.load` (weights_only=True) opens: tensors, numbers and strings."""
    return {"kind": WEIGHTS_KIND, "model": model, "epoch": epoch, "val_acc1": val_acc1,
            "from": "best epoch" if best else "last epoch"}
