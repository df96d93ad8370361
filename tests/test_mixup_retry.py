"""Issue 24, finding 5: with mixup, an out-of-memory retry mixed the same images twice. timm's Mixup changes the
batch in place, and the back-off's retry ran forward_backward (which mixed) again on those images, with the
original labels mixed anew. Now the batch is mixed once, before any retry. Real timm Mixup, the real step engine
on the CPU; the model raises the allocator's error above a batch size, as tests/fault_models.py does."""
from __future__ import annotations

import torch
from loop_helpers import cpu_plan
from torch import nn

from fasttrain.datasets.transforms import make_mixup
from fasttrain.train.loop.step import StepEngine


class Recording(nn.Module):
    """Keeps a copy of every input it sees; batches larger than `fits` fail like a full GPU."""

    def __init__(self, fits: int):
        super().__init__()
        self.fc = nn.Linear(3 * 16 * 16, 4)
        self.fits, self.seen = fits, []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.detach().clone())
        if x.shape[0] > self.fits:
            raise torch.OutOfMemoryError("CUDA out of memory (test model)")
        return self.fc(x.flatten(1))


def test_the_retry_trains_on_the_images_mixed_once() -> None:
    plan, profile = cpu_plan(speed={"precision": "fp32", "compile": False})
    optim = profile.optim.model_copy(update={"mixup_alpha": 0.8, "cutmix_alpha": 0.0})
    model = Recording(fits=4)
    engine = StepEngine.build(plan, optim, model, batches_per_epoch=1, mixup=make_mixup(optim, 4))
    torch.manual_seed(0)
    images, targets = torch.randn(8, 3, 16, 16), torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    original = images.clone()
    engine.step((images, targets), 0, 1, epoch=0, measure=False)
    first, *retried = model.seen
    assert engine.backoff.splits == 2 and len(retried) == 2
    assert not torch.equal(first, original)  # mixup did run
    assert torch.equal(torch.cat(retried), first)  # the same mixed images, not mixed a second time
