"""What a `--data` spec becomes: the train and validation datasets, their classes, and the files skipped so far.

Plain data with no torch import, so the custom-dataset loader and the builder can both hand one back
without importing each other.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from fasttrain.datasets.transforms import IMAGENET, Norm


@dataclass
class BadSample:
    """What the image dataset returns for a file it cannot decode (picklable: crosses worker processes)."""

    path: str
    reason: str


@dataclass
class BadFiles:
    """Files skipped so far: unique paths in first-seen order, and how many times a batch lost one."""

    paths: dict[str, str] = field(default_factory=dict)  # path -> reason
    skips: int = 0

    def record(self, bad: list[tuple[str, str]]) -> None:
        for path, reason in bad:
            self.paths.setdefault(path, reason)
            self.skips += 1


@dataclass
class DataBundle:
    train: Any
    val: Any
    num_classes: int
    class_names: list[str]
    kind: Literal["images", "synthetic", "custom"]
    source: str
    train_size: int
    val_size: int = 0
    strict: bool = False
    bad: BadFiles = field(default_factory=BadFiles)
    # Why no sample needs decoding per step (tensors in memory, images decoded once into RAM), or None: the plan
    # then runs 0 loader workers and gives every core to compute.
    in_memory: str | None = None
    # How the images reach the step, for the plan's notes (decoded once into RAM, or why not); None: nothing to say.
    input_note: str | None = None
    # The (mean, std) the images are normalised with (transforms.Norm): model.json records it for predict.
    norm: Norm = IMAGENET

    @property
    def decoded_in_ram(self) -> bool:
        """Images decoded once into RAM (datasets/decoded.py): no loader worker has anything to decode."""
        return self.kind == "images" and self.in_memory is not None

    def bad_files(self) -> list[str]:
        """Paths of corrupt or unreadable files skipped so far (read by the loop for the dashboard/summary)."""
        return list(self.bad.paths)
