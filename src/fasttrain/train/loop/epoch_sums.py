"""A training pass's running sums: kept on the device per step, read and summed over ranks at its end or
for a mid-epoch checkpoint (whose "partial" entry they are, so a resumed pass carries them on)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class EpochSums:
    # Sum of the finite batch losses: a float64 device scalar (no sync per step). float32 losses add exactly in
    # float64, so the sum does not depend on the order: a pass resumed mid-epoch reports the same loss.
    loss: torch.Tensor
    nonfinite: torch.Tensor     # batches whose loss was not finite (device scalar)
    images: int                 # images this rank trained on
    started: float              # perf_counter() at the epoch's start (earlier when resumed mid-epoch)

    @classmethod
    def resumed(cls, partial: dict[str, Any], *, carry: bool, device: torch.device) -> EpochSums:
        """The sums a pass starts from: a checkpoint's `partial` ({} for a fresh epoch). They are over all
        ranks, so only one rank (`carry`) takes them on; the elapsed seconds are every rank's."""
        own = partial if carry else {}
        return cls(loss=torch.full((), float(own.get("loss_sum", 0.0)), device=device, dtype=torch.float64),
                   nonfinite=torch.full((), int(own.get("nonfinite", 0)), device=device, dtype=torch.long),
                   images=int(own.get("images", 0)),
                   started=time.perf_counter() - float(partial.get("seconds", 0.0)))

    def reduced(self, dist: Any) -> tuple[float, int, int]:
        """(loss sum, non-finite batches, images) read back and, under DDP, summed over ranks."""
        loss, bad, images = float(self.loss), int(self.nonfinite), self.images
        if dist is not None:
            loss, bad_f, images_f = dist.sums(loss, bad, images)
            bad, images = int(bad_f), int(images_f)
        return loss, bad, images

    def partial(self, dist: Any) -> dict[str, Any]:
        """The epoch's sums so far for a mid-epoch checkpoint: over all ranks (every rank is at this step)."""
        seconds = time.perf_counter() - self.started
        loss, bad, images = self.reduced(dist)
        return {"loss_sum": loss, "nonfinite": bad, "images": images, "seconds": seconds}
