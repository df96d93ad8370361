"""What a run's checkpoint files will weigh, said before the run, and what they weighed after.

The forecast is a pure function of the model's tensors and the settings that add copies of them:
  - last.pt: the state dict (weights and buffers), the optimizer's state (1x the trainable weights for SGD with
    momentum, none without; 2x for Adam and AdamW: exp_avg and exp_avg_sq), the moving average of the weights
    (optim.ema_decay: another state dict), and a little more (RNG states, the history, one zip entry per tensor);
    without the copy model.safetensors keeps when the run's last epoch is its best (train/loop/checkpointing.py);
    none with checkpoint.save_last false;
  - model.safetensors: the state dict once (the best weights), model.json beside it;
  - epoch_NNNN.pt: a whole last.pt each, with --save-every.
Measured (tests/test_checkpoint_size.py checks real runs within 10%): resnet18 at 3 classes with AdamW and the
moving average, 44.75 MB of state: last.pt 179.07 MB, model.safetensors 44.76 MB.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from fasttrain.train.types import Prepared

# Bytes besides the tensors' own, measured on tiny_cnn's and resnet18's files: torch.save's zip entry per tensor
# (~290 B) and the rest of last.pt (RNG states, plan, profile, history: ~14 KB); safetensors' header (~90 B a tensor).
LAST_FIXED_BYTES = 16_000
PER_ENTRY_BYTES = 300
SAFETENSORS_PER_TENSOR_BYTES = 100
MODEL_JSON_BYTES = 600          # model.json without its class names
OPTIMIZER_COPIES = {"sgd": 1, "adam": 2, "adamw": 2}  # state tensors per trainable weight (SGD: with momentum)
OPTIMIZER_NAMES = {"sgd": "SGD momentum", "adam": "Adam", "adamw": "AdamW"}
CHECKPOINT_SUFFIXES = (".pt", ".safetensors")


@dataclass(frozen=True)
class ModelBytes:
    """A model's tensors as a checkpoint counts them."""

    weights: int                 # the state dict's bytes: parameters and buffers
    trainable: int               # the bytes of the weights the optimizer keeps state for
    tensors: int                 # entries of the state dict
    trainable_tensors: int       # parameters that train


@dataclass(frozen=True)
class CheckpointForecast:
    """The files a run leaves at its end, in bytes (`files`: at most; `total_when_last_is_best`: when the run's last
    epoch is its best, last.pt then refers to model.safetensors for those weights)."""

    files: dict[str, int]
    total: int
    total_when_last_is_best: int
    parts: list[str] = field(default_factory=list)   # what last.pt holds, in words ("weights", "AdamW state", ...)
    numbered: int = 0                                # epoch_NNNN.pt files (--save-every)

    def to_dict(self) -> dict[str, Any]:
        return {"files": dict(self.files), "total": self.total, "total_when_last_is_best":
                self.total_when_last_is_best, "last_pt_holds": list(self.parts), "numbered": self.numbered}


def model_bytes(model: torch.nn.Module) -> ModelBytes:
    """Count a model's tensors (one built on the meta device is enough: sizes only)."""
    state = model.state_dict()
    trainable = [p for p in model.parameters() if p.requires_grad and p.is_floating_point()]
    return ModelBytes(sum(t.numel() * t.element_size() for t in state.values()),
                      sum(p.numel() * p.element_size() for p in trainable), len(state), len(trainable))


def forecast(model: ModelBytes, *, optimizer: str, momentum: float, ema: bool, keep_last: bool, numbered: int = 0,
             class_names_bytes: int = 0) -> CheckpointForecast:
    """The files a run of `model` leaves (see the module docstring). Pure."""
    copies = OPTIMIZER_COPIES.get(optimizer, 2) if optimizer != "sgd" or momentum > 0 else 0
    entries = model.tensors * (2 if ema else 1) + model.trainable_tensors * (copies + (optimizer != "sgd"))
    last = (model.weights * (2 if ema else 1) + model.trainable * copies + LAST_FIXED_BYTES
            + PER_ENTRY_BYTES * entries)
    files = {"model.safetensors": model.weights + SAFETENSORS_PER_TENSOR_BYTES * model.tensors,
             "model.json": MODEL_JSON_BYTES + class_names_bytes}
    parts = ["weights"] + ([f"{OPTIMIZER_NAMES.get(optimizer, optimizer)} state"] if copies else []) + \
        (["EMA"] if ema else [])
    if keep_last:
        files = {"last.pt": last, **files}
    if keep_last and numbered:
        files["epoch_NNNN.pt"] = numbered * last
    total = sum(files.values())
    deduped = total - model.weights if keep_last else total
    return CheckpointForecast(files, total, deduped, parts, numbered)


def for_run(prep: Prepared, model: torch.nn.Module | None = None) -> CheckpointForecast:
    """The forecast for a prepared run: `model` counted (the run's own), else one built on the meta device (no
    memory; a builder's model before the run takes it), with the profile's settings."""
    from fasttrain.estimate.cost import build_model

    profile = prep.resolved.profile
    if model is None:
        model = build_model(prep.model_name, prep.bundle.num_classes, prep.plan.image_size)
    every = prep.args.save_every
    return forecast(model_bytes(model), optimizer=profile.optim.optimizer, momentum=profile.optim.momentum,
                    ema=profile.optim.ema_decay is not None, keep_last=profile.checkpoint.save_last,
                    numbered=profile.optim.epochs // every if every else 0,
                    class_names_bytes=len(json.dumps(list(prep.bundle.class_names))))


def words(told: CheckpointForecast) -> str:
    """`last.pt 171 MiB (weights, AdamW state, EMA) + model.safetensors 43 MiB = 213 MiB (171 MiB when the last
    epoch is the best: its weights kept once)`, or without last.pt what that costs. Pure."""
    from fasttrain.core.format import fmt_bytes

    weights = f"model.safetensors {fmt_bytes(told.files['model.safetensors'])}"
    if "last.pt" not in told.files:
        return f"no last.pt (checkpoint.save_last: false): the run cannot be resumed; {weights} (the best weights)"
    text = f"last.pt {fmt_bytes(told.files['last.pt'])} ({', '.join(told.parts)}) + {weights}"
    if told.numbered:
        text += f" + {told.numbered} x epoch_NNNN.pt"
    return (text + f" = {fmt_bytes(told.total)} ({fmt_bytes(told.total_when_last_is_best)} when the last epoch is "
            "the best: its weights kept once)")


def run_files(run_dir: Path) -> dict[str, int]:
    """The checkpoint files of a run folder and their bytes on disk (model.json included), by name."""
    folder = Path(run_dir)
    if not folder.is_dir():
        return {}
    found = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
             and (p.suffix in CHECKPOINT_SUFFIXES or p.name == "model.json")]
    return {p.name: p.stat().st_size for p in sorted(found)}
