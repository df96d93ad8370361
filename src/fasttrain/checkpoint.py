"""Checkpoints written atomically and checked on load.

Write: a temporary file in the same directory, flushed and fsynced, then os.replace() over the old
name (atomic on POSIX within one file system), then the directory is fsynced so the rename survives a
power cut. A reader therefore sees the old checkpoint or the new one, never half of one.
Content is everything an exact resume needs (issue 6): model, optimizer, GradScaler, LR schedule,
epoch and batch inside it, sampler state, RNG states, the resolved profile and versions.
"""
from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import torch

from fasttrain.errors import Problem, UserError

FORMAT = "fasttrain-checkpoint"
FORMAT_VERSION = 1


def rng_states() -> dict[str, Any]:
    import numpy as np
    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(),
                             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_states(state: dict[str, Any]) -> None:
    import numpy as np
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def versions() -> dict[str, str]:
    from fasttrain import __version__
    return {"fasttrain": __version__, "torch": torch.__version__}


def save_atomic(payload: dict[str, Any], path: Path) -> Path:
    """torch.save to `path` atomically (see module docstring). Returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": FORMAT, "format_version": FORMAT_VERSION, "versions": versions(), **payload}
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


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


def load(path: Path) -> dict[str, Any]:
    """Read and check a checkpoint; a missing, truncated or foreign file is a UserError naming it."""
    path = Path(path)
    if not path.is_file():
        raise UserError([Problem(str(path), "no such checkpoint file", _previous_hint(path))])
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a damaged file
        raise UserError([Problem(str(path), f"not a readable checkpoint (truncated or corrupt?): "
                                 f"{type(exc).__name__}", _previous_hint(path))]) from exc
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise UserError([Problem(str(path), "not a fasttrain checkpoint", _previous_hint(path))])
    if payload.get("format_version", 0) > FORMAT_VERSION:
        raise UserError([Problem(str(path), f"written by a newer fasttrain (format {payload['format_version']})",
                                 "upgrade fasttrain to load it")])
    return payload


def load_model_state(model: torch.nn.Module, payload: dict[str, Any], path: Path) -> None:
    """Copy weights, refusing (with every differing tensor named) when shapes or names do not match."""
    state = payload.get("model")
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


def _previous_hint(path: Path) -> str:
    others = sorted((p for p in path.parent.glob("*.pt") if p != path and p.is_file()),
                    key=lambda p: p.stat().st_mtime, reverse=True) if path.parent.is_dir() else []
    return f"the previous checkpoint in that folder is {others[0]}" if others else ""


class CheckpointPolicy:
    """Which checkpoints a run keeps: last.pt every epoch, best.pt on a new best, epoch_N.pt every N epochs."""

    def __init__(self, directory: Path, every_epochs: int | None = None):
        self.directory = Path(directory)
        self.every_epochs = every_epochs

    def save_epoch(self, payload: dict[str, Any], epoch: int, is_best: bool) -> list[Path]:
        written = [save_atomic(payload, self.directory / "last.pt")]
        if is_best:
            written.append(save_atomic(payload, self.directory / "best.pt"))
        if self.every_epochs and (epoch + 1) % self.every_epochs == 0:
            written.append(save_atomic(payload, self.directory / f"epoch_{epoch + 1:04d}.pt"))
        return written
