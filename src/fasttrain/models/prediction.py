"""A trained model over batches of images: each image's class probabilities (softmax of the logits, in float32).

The batches come from the caller (datasets/inference.py reads and preprocesses the files), so this module knows
nothing of files; the model runs in inference mode on `device` (the CPU unless given)."""
from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import torch

Item = TypeVar("Item")  # what names an image: a path, an id


def class_probabilities(model: torch.nn.Module, batches: Iterable[tuple[list[Item], torch.Tensor | None, list]],
                        device: str = "cpu") -> tuple[list[Item], list[list[float]], list]:
    """(the items read, in order, each one's probabilities per class, everything the batches said they could not
    read). `batches` yields (items, their images as one float batch or None, unreadable entries)."""
    import torch

    model = model.to(device).eval()
    items: list[Item] = []
    probabilities: list[list[float]] = []
    unreadable: list = []
    with torch.inference_mode():
        for read, images, bad in batches:
            unreadable += bad
            if images is None:
                continue
            logits = model(images.to(device)).float()
            probabilities += torch.softmax(logits, dim=1).cpu().tolist()
            items += read
    return items, probabilities, unreadable
