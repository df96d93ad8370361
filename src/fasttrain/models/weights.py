"""`--weights FILE`: start a run from weights trained elsewhere, matched to the model by name and shape.

A file is read without unpickling anything but tensors (torch.load(weights_only=True), or safetensors): a plain
`torch.save`d state_dict, `.safetensors`, a timm training checkpoint ({'state_dict'|'state_dict_ema'|'model': ...}),
a torchvision checkpoint, a fasttrain run folder or its model.safetensors / best.pt / last.pt (a last.pt that refers
to model.safetensors for its weights reads them there). Names lose the
wrappers' prefixes (`module.` of DataParallel/DDP, `model.`, `_orig_mod.` of torch.compile) where the model has no
such name. The classifier is re-made when its class count differs. prepare() matches the file against the model
built on the meta device (match_file: the plan shows the counts, a wrong file fails before training); the run
loads the tensors for real (load_into) into the model it trains.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.core.errors import Problem, UserError

if TYPE_CHECKING:
    import torch

WRAPPER_PREFIXES = ("module.", "model.", "_orig_mod.")
# Keys under which training checkpoints keep the weights; EMA first, as timm's own load_checkpoint prefers it.
NESTED_KEYS = ("state_dict_ema", "model_ema", "state_dict", "model", "model_state_dict", "net", "module")
RUN_FILES = ("model.safetensors", "best.pt", "last.pt")  # a fasttrain run folder's weights, best first
SKIPPED_BUFFERS = (".num_batches_tracked",)  # a step counter, not a weight: neither counted nor loaded
# Below this share of the model's tensors (the head excluded) matching by name and shape, the file is another
# model: a fine-tune of the same architecture matches all of them, a deeper sibling (resnet34 into resnet18) or a
# changed stem still most; under half, most of the network would start random and the start from weights a fiction.
MIN_MATCH_SHARE = 0.5
FLAG = "--weights"


@dataclass(frozen=True)
class WeightsMatch:
    """How a weights file fits a model: what loads, what is re-made or left random, and why."""

    source: str                                   # the path as given
    path: str                                     # the file the tensors come from (a run folder's file)
    loaded: int                                   # tensors of the model that take the file's values
    total: int                                    # tensors of the model
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (model tensor, why it is not loaded)
    missing: list[str] = field(default_factory=list)              # model tensors the file has no value for
    names: dict[str, str] = field(default_factory=dict)           # model tensor -> the file's name for it
    head: list[str] = field(default_factory=list)                 # classifier tensors re-made for the classes
    num_classes: int = 0                                          # the run's classes (the head's outputs)

    def line(self) -> str:
        """`pre.pth: 100 of 102 tensors loaded; fc.weight, fc.bias re-made for 10 classes` (running statistics
        of batch norms count as tensors; their step counters do not)."""
        text = f"{Path(self.source).name or self.source}: {self.loaded} of {self.total} tensors loaded"
        if self.head:
            text += f"; {', '.join(self.head)} re-made for {self.num_classes} classes"
        other = [name for name, _ in self.skipped if name not in self.head]
        if other:
            text += f"; {len(other)} skipped ({other[0]}: {dict(self.skipped)[other[0]]})"
        if self.missing:
            text += f"; {len(self.missing)} not in the file, left random (e.g. {self.missing[0]})"
        return text

    def record(self) -> dict[str, Any]:
        """summary.json's and model.json's "init"."""
        return {"weights": self.source, "file": self.path, "loaded": self.loaded, "of": self.total,
                "skipped": [list(s) for s in self.skipped], "missing": list(self.missing)}


def _problem(source: str, what: str, fix: str) -> UserError:
    return UserError([Problem(FLAG, what, fix, source)])


def weights_file(source: str) -> Path:
    """The file behind `source`: itself, or a fasttrain run folder's model files; UserError when there is none."""
    path = Path(source).expanduser()
    if path.is_dir():
        found = next((path / name for name in RUN_FILES if (path / name).is_file()), None)
        if found is None:
            raise _problem(source, f"a folder without weights (none of {', '.join(RUN_FILES)})",
                           "give a weights file, or a fasttrain run folder that finished an epoch")
        return found
    if not path.is_file():
        raise _problem(source, "no such file", "give the path of a .pth/.pt/.safetensors file or a run folder")
    return path


def read_state(path: Path, source: str) -> dict[str, torch.Tensor]:
    """The file's tensors by name, from any of the layouts in the module docstring; one-line UserErrors."""
    import torch

    if path.stat().st_size == 0:
        raise _problem(source, "an empty file, not weights", "give the file a torch.save or safetensors wrote")
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load_file
        try:
            return load_file(str(path))
        except (SafetensorError, OSError, ValueError) as exc:
            raise _problem(source, f"not readable safetensors (truncated or corrupt?): {_first_line(exc)}",
                           "give the file whole, as safetensors wrote it") from None
    try:
        with torch.serialization.safe_globals(_numpy_arrays()):  # a fasttrain last.pt's RNG states
            payload = torch.load(path, map_location="cpu", weights_only=True, mmap=False)
    except Exception as exc:
        text = str(exc)
        if "Weights only load failed" in text or "Unsupported global" in text:
            raise _problem(source, "holds Python objects besides tensors, which fasttrain does not unpickle "
                           "(torch.load(weights_only=True) refused it)", "save model.state_dict() instead, e.g. "
                           "torch.save(model.state_dict(), 'pre.pth')") from None
        raise _problem(source, f"not a weights file (truncated or corrupt?): {type(exc).__name__}",
                       "give a .pth/.pt that torch.save wrote, or a .safetensors file") from None
    if isinstance(payload, dict):  # a last.pt that keeps its weights once, in model.safetensors beside it
        from fasttrain.models.saved import resolve_references
        if (missing := resolve_references(payload, path.parent)) is not None:
            raise _problem(source, missing, "give the run folder whole, or its model.safetensors")
    state = _tensors_of(payload)
    if not state:
        raise _problem(source, "holds no tensors by name (not a state_dict or a checkpoint of one)",
                       "save model.state_dict() with torch.save")
    return state


def _numpy_arrays() -> list[Any]:
    """What torch's safe loader needs besides tensors to read numpy arrays (a fasttrain checkpoint's numpy RNG state,
    an array of uint32): numpy's array reconstruction, the array and dtype types, as torch's serialization docs
    allow them. Nothing that runs code of the file's choosing."""
    import importlib

    import numpy as np
    # numpy 2 moved it from numpy.core to numpy._core; the module, not an attribute chain mypy would check per version
    multiarray = importlib.import_module("numpy._core.multiarray" if hasattr(np, "_core") else "numpy.core.multiarray")
    reconstruct = multiarray._reconstruct
    return [reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def _tensors_of(payload: object) -> dict[str, torch.Tensor]:
    """The state dict inside a loaded payload: itself, or under one of NESTED_KEYS (a checkpoint)."""
    import torch

    if not isinstance(payload, Mapping):
        return {}
    for key in NESTED_KEYS:
        inner = payload.get(key)
        if isinstance(inner, Mapping) and any(isinstance(v, torch.Tensor) for v in inner.values()):
            return _tensors_of(inner)
    return {str(k): v for k, v in payload.items() if isinstance(v, torch.Tensor)}


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__


def own_name(name: str, wanted: Mapping[str, object]) -> str:
    """The model's name for the file's `name`: wrapper prefixes dropped while the model has no such name. Pure."""
    while name not in wanted and name.startswith(WRAPPER_PREFIXES):
        name = name.split(".", 1)[1]
    return name


def match_shapes(source: str, path: str, model_shapes: Mapping[str, tuple[int, ...]],
                 file_shapes: Mapping[str, tuple[int, ...]], head: list[str], num_classes: int,
                 model_name: str) -> WeightsMatch:
    """Which of the model's tensors take the file's values (same name, same shape); the head's tensors of another
    class count are re-made. UserError for another architecture or another count of input channels. Pure."""
    wanted = {k: tuple(v) for k, v in model_shapes.items() if not k.endswith(SKIPPED_BUFFERS)}
    by_own: dict[str, str] = {}
    for name in file_shapes:
        if not name.endswith(SKIPPED_BUFFERS):
            by_own.setdefault(own_name(name, wanted), name)
    names, skipped, missing, remade = {}, [], [], []
    for name, shape in wanted.items():
        theirs = by_own.get(name)
        if theirs is None:
            missing.append(name)
            continue
        got = tuple(file_shapes[theirs])
        if got == shape:
            names[name] = theirs
        elif name in head:
            remade.append(name)
            skipped.append((name, f"shape {got} vs {shape}: the head is re-made for {num_classes} classes"))
        else:
            _check_channels(source, name, got, shape)
            skipped.append((name, f"shape {got} vs {shape}"))
    body = [n for n in wanted if n not in head]
    matched = sum(1 for n in body if n in names)
    if body and matched < MIN_MATCH_SHARE * len(body):
        strange = next((n for n in file_shapes if own_name(n, wanted) not in wanted), None)
        example = (f" (e.g. {own_name(strange, wanted)} is not in {model_name})" if strange else
                   f" (e.g. {skipped[0][0]}: {skipped[0][1]})" if skipped else "")
        raise _problem(source, f"holds weights of another model: {matched} of {len(body)} tensors of "
                       f"{model_name} match{example}", f"train the model these weights are for (--model), or give "
                       f"weights of {model_name}")
    return WeightsMatch(source, path, len(names), len(wanted), skipped, missing, names, remade, num_classes)


def _check_channels(source: str, name: str, got: tuple[int, ...], shape: tuple[int, ...]) -> None:
    """A first convolution that differs only in its input channels: images of another kind (grey vs colour)."""
    if len(got) == 4 and len(shape) == 4 and got[0] == shape[0] and got[2:] == shape[2:] and got[1] != shape[1]:
        raise _problem(source, f"was trained on {got[1]}-channel images ({name} {got}); this model takes "
                       f"{shape[1]} channels {shape}", "give weights for images with the same channels (RGB: 3)")


def head_names(model: torch.nn.Module, num_classes: int) -> list[str]:
    """The classifier's tensors: timm's get_classifier(), else the last layer with `num_classes` outputs."""
    import torch

    modules = list(model.named_modules())
    get_classifier = getattr(model, "get_classifier", None)  # timm's models have it
    classifier = get_classifier() if callable(get_classifier) else None
    prefix = next((name for name, m in modules if classifier is not None and m is classifier and name), None)
    if prefix is None:
        outputs = [name for name, m in modules if isinstance(m, (torch.nn.Linear, torch.nn.Conv2d)) and name
                   and getattr(m, "weight", None) is not None and m.weight.shape[0] == num_classes]
        prefix = outputs[-1] if outputs else None
    if prefix is None:
        return []
    return [k for k in model.state_dict() if k.startswith(prefix + ".")]


def match_file(source: str, model: torch.nn.Module, num_classes: int, model_name: str) -> WeightsMatch:
    """Read `source` and match it against `model` (built on the meta device is enough: shapes only)."""
    path = weights_file(source)
    state = read_state(path, source)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    return match_shapes(source, str(path), shapes, {k: tuple(v.shape) for k, v in state.items()},
                        head_names(model, num_classes), num_classes, model_name)


def check_weights(source: str, model_name: str, num_classes: int, image_size: int | None) -> WeightsMatch:
    """match_file against `model_name` built on the meta device: no memory, no weights initialised."""
    import torch

    from fasttrain.models.registry import create_model
    with torch.device("meta"):
        model = create_model(model_name, num_classes, image_size=image_size)
    return match_file(source, model, num_classes, model_name)


def load_into(model: torch.nn.Module, match: WeightsMatch) -> int:
    """Copy the matched tensors of match.path into `model` (on the CPU, before anything moves it); -> how many."""
    import torch

    state = read_state(Path(match.path), match.source)
    own = model.state_dict()
    with torch.no_grad():
        for name, theirs in match.names.items():
            own[name].copy_(state[theirs])
    return len(match.names)
