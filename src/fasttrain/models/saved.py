"""A trained model as its user needs it: `model.safetensors` (weights that load without pickle, and with
`torch.load`'s safe default nowhere involved) beside `model.json` (the model's name, the class names in index order,
the input size and normalisation), written in the run folder at the end of a run and read by `fasttrain predict`.

Loading it in your own code (docs/train.md, "Using the trained model"):

    from fasttrain.models.saved import load_trained
    model, meta = load_trained("runs/NAME")        # eval mode, on the CPU

A run that validated each image with its mirror image (`augment.test_flip`, meta["test_flip"]) is loaded as a
module that does the same (mirror_averaged: logits of the image and of its mirror, averaged), so what you get is
what the run's accuracy measured; its own weights are `model.model`.

model.safetensors is the run's one copy of its best weights: a last.pt written at the best epoch holds, instead of
the same tensors again, a reference to it (`reference`: the name, its SHA-256, the prefix of the entry's names),
which train/state/checkpoint.load() and `--weights` follow (`resolve_references`; while a newer model.safetensors
replaces the one a last.pt on disk refers to, that one is kept as PREVIOUS_FILE, a hard link).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.core.errors import Problem, UserError
from fasttrain.core.files import write_text_atomic

if TYPE_CHECKING:
    import torch

WEIGHTS_FILE = "model.safetensors"
META_FILE = "model.json"
FORMAT = "fasttrain-model"
FORMAT_VERSION = 1
REFERENCE_KEY = "same_as"  # a checkpoint entry {"same_as": "model.safetensors", "sha256": ..., "prefix": ...}
# The weights a last.pt on disk refers to, kept (a hard link) while model.safetensors is replaced under it.
PREVIOUS_FILE = ".model.safetensors.prev"


def save_trained(folder: Path, state: dict[str, Any], meta: dict[str, Any] | None) -> Path:
    """Write the weights (a state dict) and, with `meta`, their description (model.json), each atomically; the
    weights are fsynced before the rename (a last.pt may refer to them). -> the weights file."""
    from safetensors.torch import save_file

    folder = Path(folder)
    # safetensors takes contiguous tensors that share no storage: channels_last and tied weights are copied out.
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state.items() if hasattr(v, "detach")}
    weights = folder / WEIGHTS_FILE
    fd, partial = tempfile.mkstemp(prefix=f".{WEIGHTS_FILE}.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        save_file(tensors, partial, metadata={"format": FORMAT, "model": str((meta or {}).get("model", ""))})
        with open(partial, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(partial, weights)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    if meta is not None:
        write_text_atomic(folder / META_FILE, json.dumps({"format": FORMAT, "format_version": FORMAT_VERSION,
                                                          "weights": WEIGHTS_FILE, **meta}, indent=1) + "\n")
    return weights


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (read in 8 MiB pieces)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while piece := fh.read(8 << 20):
            digest.update(piece)
    return digest.hexdigest()


def reference(folder: Path, prefix: str = "") -> dict[str, str]:
    """What a checkpoint holds instead of weights model.safetensors keeps: the file, its SHA-256 (it must not change
    after) and the prefix of the entry's names ("module." for the moving average's)."""
    return {REFERENCE_KEY: WEIGHTS_FILE, "sha256": file_digest(Path(folder) / WEIGHTS_FILE), "prefix": prefix}


def is_reference(value: object) -> bool:
    return (isinstance(value, dict) and isinstance(value.get(REFERENCE_KEY), str)
            and isinstance(value.get("sha256"), str))


def resolve_references(payload: dict[str, Any], folder: Path) -> str | None:
    """Every entry of `payload` that refers to a weights file, replaced by its tensors (named as they were) -> None,
    or what is wrong in words: the file missing, changed since, or unreadable."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    for key, value in list(payload.items()):
        if not is_reference(value):
            continue
        named = Path(folder) / Path(value[REFERENCE_KEY]).name  # beside the checkpoint, never elsewhere
        kept = f"its '{key}' weights are kept once, in {named.name} beside it, which"
        if not named.is_file():
            return f"{kept} is missing (keep the run folder whole)"
        path = next((p for p in (named, Path(folder) / PREVIOUS_FILE) if p.is_file()
                     and file_digest(p) == value["sha256"]), None)
        if path is None:
            return f"{kept} has changed since (its SHA-256 differs)"
        try:
            tensors = load_file(str(path))
        except (OSError, SafetensorError) as exc:
            return f"{kept} is not readable ({type(exc).__name__})"
        prefix = str(value.get("prefix") or "")
        payload[key] = {prefix + name: tensor for name, tensor in tensors.items()}
    return None


def read_meta(run: Path) -> dict[str, Any]:
    """model.json of a run folder, checked; a UserError naming what is missing and how to get it."""
    path = Path(run) / META_FILE
    if not Path(run).is_dir():
        raise UserError([Problem("RUN", f"{str(run)!r} is not a run folder", "give a folder under runs/ that a "
                                 "`fasttrain train` wrote", str(run))])
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError([Problem(str(path), "no such file: this run has no saved model",
                                 "a run writes model.json and model.safetensors when it ends; one stopped before "
                                 "its first epoch, or written by an older fasttrain, has none (train it further "
                                 "with `fasttrain train --resume RUN`)")]) from None
    except (OSError, ValueError) as exc:
        problem = Problem(str(path), f"not readable: {type(exc).__name__}: {exc}", "train the run again")
        raise UserError([problem]) from None
    needed = ("model", "num_classes", "class_names", "image_size", "mean", "std")
    missing = [k for k in needed if k not in meta] if isinstance(meta, dict) else list(needed)
    if missing or not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise UserError(
            [
                Problem(
                    str(path),
                    "not a fasttrain model description" + (f" (no {', '.join(missing)})" if missing else ""),
                    "use the model.json a run wrote",
                )
            ]
        )
    return meta


def load_trained(run: Path | str) -> tuple[torch.nn.Module, dict[str, Any]]:
    """(the trained model in eval mode on the CPU, its model.json) from a run folder."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from fasttrain.models.registry import create_model

    meta = read_meta(Path(run))
    weights = Path(run) / meta.get("weights", WEIGHTS_FILE)
    if ":" in str(meta["model"]):
        _builder_importable(str(meta["model"]), meta.get("module_dir"), Path(run))
    model = create_model(meta["model"], int(meta["num_classes"]), image_size=int(meta["image_size"]))
    try:
        state = load_file(str(weights))
    except (OSError, SafetensorError) as exc:
        raise UserError(
            [Problem(str(weights), f"not readable weights: {type(exc).__name__}", "train the run again")]
        ) from None
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise UserError(
            [
                Problem(
                    str(weights),
                    f"the weights do not fit {meta['model']}: {str(exc)[:200]}",
                    "use the model.json and model.safetensors of the same run",
                )
            ]
        ) from None
    return (mirror_averaged(model) if meta.get("test_flip") else model).eval(), meta


def _builder_importable(spec: str, folder: object, run: Path) -> None:
    """A module:callable model is rebuilt by its module: importable from here, or from the folder it was trained
    from (model.json's module_dir, put on sys.path); else a UserError naming the module."""
    import importlib.util
    import sys

    module = spec.partition(":")[0]
    top = module.split(".")[0]
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    there = isinstance(folder, str) and (Path(folder, top).is_dir() or Path(folder, top + ".py").is_file())
    if there and importlib.util.find_spec(top) is None:
        sys.path.insert(0, str(folder))
    if importlib.util.find_spec(top) is None:
        where = f" nor in {folder}, where the run was trained" if isinstance(folder, str) else ""
        raise UserError(
            [
                Problem(
                    str(run / META_FILE),
                    f"the model is built by {spec}: module {module!r} is not importable from here{where}",
                    f"put {top} on PYTHONPATH (or run from the folder that holds it)",
                )
            ]
        )


def mirror_averaged(model: torch.nn.Module) -> torch.nn.Module:
    """`model` behind a forward that averages the logits of each image and of its left-right mirror image: the
    validation of a run with augment.test_flip (train/loop/validation.py), for predictions that match it."""
    import torch

    class MirrorAveraged(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.model = inner

        def forward(self, images: torch.Tensor) -> torch.Tensor:
            return (self.model(images).float() + self.model(images.flip(-1)).float()) / 2

    return MirrorAveraged(model)
