"""A training pass's running sums: kept on the device per step, read and summed over ranks at its end or
for a mid-epoch checkpoint (whose `partial` they are, so a resumed pass carries them on)."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from fasttrain.core.errors import JobFailed
from fasttrain.train.loop.step import StepOutcome
from fasttrain.train.state.run_state import EpochPartial

if TYPE_CHECKING:
    from fasttrain.train.parallel.ddp import DistContext


@dataclass
class EpochSums:
    # Sum of the finite batch losses: a float64 device scalar (no sync per step). float32 losses add exactly in
    # float64, so the sum does not depend on the order: a pass resumed mid-epoch reports the same loss.
    loss: torch.Tensor
    nonfinite: torch.Tensor     # batches whose loss was not finite (device scalar)
    images: int                 # images this rank trained on
    started: float              # perf_counter() at the epoch's start (earlier when resumed mid-epoch)

    @classmethod
    def resumed(cls, partial: EpochPartial | None, *, carry: bool, device: torch.device) -> EpochSums:
        """The sums a pass starts from: a checkpoint's partial sums (None for a fresh epoch). They are over all
        ranks, so only one rank (`carry`) takes them on; the elapsed seconds are every rank's."""
        start = partial or EpochPartial()
        own = start if carry else EpochPartial()
        return cls(loss=torch.full((), own.loss_sum, device=device, dtype=torch.float64),
                   nonfinite=torch.full((), own.nonfinite, device=device, dtype=torch.long),
                   images=own.images, started=time.perf_counter() - start.seconds)

    def add(self, out: StepOutcome) -> None:
        """One step's loss (when finite) and images; stays on the device."""
        self.loss += torch.where(out.loss_ok, out.loss, 0.0)
        self.nonfinite += ~out.loss_ok
        self.images += out.images

    def remove(self, out: StepOutcome) -> None:
        """Take back a step added before (a dropped accumulation window: trained again after a resume)."""
        self.loss -= torch.where(out.loss_ok, out.loss, 0.0)
        self.nonfinite -= (~out.loss_ok).long()
        self.images -= out.images

    def reduced(self, dist: DistContext | None) -> tuple[float, int, int]:
        """(loss sum, non-finite batches, images) read back and, under DDP, summed over ranks."""
        loss, bad, images = float(self.loss), int(self.nonfinite), self.images
        if dist is not None:
            loss, bad_f, images_f = dist.sums(loss, bad, images)
            bad, images = int(bad_f), int(images_f)
        return loss, bad, images

    def partial(self, dist: DistContext | None) -> EpochPartial:
        """The epoch's sums so far for a mid-epoch checkpoint: over all ranks (every rank is at this step)."""
        seconds = time.perf_counter() - self.started
        loss, bad, images = self.reduced(dist)
        return EpochPartial(loss, bad, images, seconds)

    def totals(self, dist: DistContext | None, batches: int, *, epoch: int, lr: float) -> dict[str, float | int]:
        """The pass's row: mean training loss over the finite batches, non-finite count, images, seconds.
        `batches`: loader batches this epoch over all ranks. A whole epoch of non-finite losses is divergence."""
        loss_total, bad_total, images_seen = self.reduced(dist)
        # fp16 overflows now and then (the GradScaler skips those steps); a whole epoch of them is divergence.
        if batches and bad_total == batches:
            raise JobFailed(f"training diverged in epoch {epoch + 1}: every training loss was NaN or infinite "
                            f"(LR {lr:.4g}); lower optim.base_lr or set optim.clip_grad_norm")
        return {"train_loss": loss_total / max(1, batches - bad_total), "train_nonfinite_batches": bad_total,
                "train_images": images_seen, "train_s": time.perf_counter() - self.started}


def take_back(window: list[StepOutcome], sums: EpochSums) -> int:
    """Undo the sums of the micro-steps of an accumulation window that will not close (a stop request in it; the
    engine drops their gradients, StepEngine.drop_open_window); -> how many there were."""
    for out in window:
        sums.remove(out)
    return len(window)
