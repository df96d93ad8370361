"""What a loader hands the step, and where a batch sits in its accumulation window."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

# What a loader hands over: (images, targets[, extra...]) or a dict with "images" and "targets".
Batch = Sequence[torch.Tensor] | Mapping[str, torch.Tensor]


def window_length(batch_index: int, batches_in_epoch: int, accumulation: int) -> tuple[int, bool]:
    """(length of the accumulation window holding this batch, whether this batch closes it). Pure."""
    start = (batch_index // accumulation) * accumulation
    length = min(accumulation, batches_in_epoch - start) if batches_in_epoch > 0 else accumulation
    return max(1, length), batch_index - start == length - 1


def unpack_batch(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(images, targets) or (images, targets, extra...) as a DataLoader hands it over, or a dict of them."""
    if isinstance(batch, Mapping):
        return batch["images"], batch["targets"]
    return batch[0], batch[1]
