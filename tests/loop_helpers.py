"""Helpers shared by the loop's tests: a CPU plan from a recorded report, tiny models, tiny image folders."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def cpu_report() -> Any:
    from fasttrain.hardware.report import HardwareReport
    return HardwareReport.model_validate(json.loads((FIXTURES / "reports" / "cpu_only.json").read_text()))


def cpu_plan(**sections: dict[str, Any]) -> tuple[Any, Any]:
    """(plan, profile) for the CPU from Profile defaults plus `sections`, e.g. speed={"precision": "fp32"}."""
    from fasttrain.plan import make_plan
    from fasttrain.profiles.schema import Profile
    data = {"loader": {"batch_size": 4, "num_workers": 0, "image_size": 16}, **sections}
    profile = Profile.model_validate(data)
    report = cpu_report()
    report.torch.compile_ok = True
    return make_plan(profile, report), profile


def tiny_mlp(in_features: int = 12, classes: int = 3, seed: int = 0) -> Any:
    """No batch norm: its batch statistics would make accumulation differ from one large batch."""
    import torch
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(in_features, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, classes))


def write_image_folder(root: Path, classes: int = 3, train_per_class: int = 8, val_per_class: int = 4,
                       size: int = 16) -> Path:
    """Real PNG files in ImageFolder layout; each class has its own colour, so it is learnable."""
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(0)
    colours = [(220, 30, 30), (30, 220, 30), (30, 30, 220), (220, 220, 30), (30, 220, 220)]
    for split, n in (("train", train_per_class), ("val", val_per_class)):
        for c in range(classes):
            folder = root / split / f"class{c}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                pixels = np.clip(np.array(colours[c]) + rng.normal(0, 20, (size, size, 3)), 0, 255).astype("uint8")
                Image.fromarray(pixels).save(folder / f"{i}.png")
    return root


# The profile the command-level loop tests train with: 16 px, batch 4, no worker processes, 2 epochs.
TINY_PROFILE = """\
extends: cpu
loader:
  batch_size: 4
  num_workers: 0
  prefetch_factor: null
  persistent_workers: false
  image_size: 16
optim:
  epochs: 2
  warmup_epochs: 0
"""
# The same, with nothing left to chance: fp32 and eager, for tests that compare weights bit for bit.
DETERMINISTIC_PROFILE = TINY_PROFILE + """\
speed:
  precision: fp32
  compile: false
"""


def make_trainer(plan: Any, optim: Any, model: Any, *, batches: int, collaborators: Any = None, stop: Any = None,
                 dist: Any = None, **settings: Any) -> Any:
    """The step engine for `model` and a Trainer around it, as train/run/execute.py builds them. `settings`:
    LoopOptions fields (patience defaults to the profile's) and StepEngine.build keywords."""
    import dataclasses

    from fasttrain.train.loop.step import StepEngine
    from fasttrain.train.loop.trainer import LoopOptions, Trainer
    loop_fields = {f.name for f in dataclasses.fields(LoopOptions)}
    options = {"patience": optim.early_stopping_patience, **{k: v for k, v in settings.items() if k in loop_fields}}
    engine = {k: v for k, v in settings.items() if k not in loop_fields}
    built = StepEngine.build(plan, optim, model, batches_per_epoch=batches, dist=dist, **engine)
    return Trainer(built, collaborators=collaborators, options=LoopOptions(**options), stop=stop, dist=dist)


class Clock:
    """A clock the test sets by hand (seconds): `clock.now = 5.0`; called, it reads `now`."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def tiny_run_folder(root: Path, profile: str | None = None) -> Path:
    """A working folder for real CLI runs: data/ (write_image_folder: 3 classes x 8 train images, 6 batches of 4 an
    epoch) and tiny.yaml (DETERMINISTIC_PROFILE unless `profile` is given). -> root."""
    write_image_folder(root / "data")
    (root / "tiny.yaml").write_text(DETERMINISTIC_PROFILE if profile is None else profile)
    return root
