"""Validation: loss, acc@1 and (with 5 or more classes) acc@5 over a loader, with one sync at the end; for a whole
validation also the confusion matrix (class_tally.py), added up on the device beside them."""
from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch

from fasttrain.train.loop.batches import unpack_batch
from fasttrain.train.loop.class_tally import ClassSink, add_pairs, summed
from fasttrain.train.loop.norm_stats import RecentBatches, reestimate
from fasttrain.train.loop.step import StepEngine

if TYPE_CHECKING:
    from fasttrain.train.parallel.ddp import DistContext


@torch.no_grad()
def evaluate(engine: StepEngine, loader: Iterable[Any], *, dist: DistContext | None = None,
             max_batches: int | None = None, test_flip: bool = False,
             norms: RecentBatches | None = None, classes_to: ClassSink | None = None) -> dict[str, Any]:
    """-> val_loss, val_acc1, val_acc5 (None under 5 classes), val_images, val_s (seconds); summed over ranks.
    `test_flip`: the logits of each image and of its mirror image, averaged (twice the validation compute).
    `norms`: the last training batches, on which the batch-norm statistics of the validated weights are first
    re-estimated (norm_stats.py; under DDP averaged over the ranks, so all validate the same statistics; their
    seconds count in val_s). `classes_to`: handed the [true, predicted] counts of the same top-1 (summed over
    ranks, on the host), or None with the class count when there are too many."""
    device = engine.device
    started = time.perf_counter()
    if norms is not None:
        reestimate(engine, norms, dist)
    engine.train_mode(False)
    # Under DDP the eager module: DDP's forward may broadcast buffers, a collective that ranks with unequal
    # validation shards would not all reach.
    run = engine.evaluated or (engine.module if dist is not None else engine.runner)
    loss_sum = torch.zeros((), device=device)
    top1 = torch.zeros((), device=device, dtype=torch.long)
    top5 = torch.zeros((), device=device, dtype=torch.long)
    count, classes = 0, None
    confusion: torch.Tensor | None = None  # flat [true * C + predicted] counts, on the device
    for i, batch in enumerate(loader):
        if max_batches is not None and i >= max_batches:
            break
        images, targets = engine.to_device(*unpack_batch(batch))
        with engine.precision.autocast():
            logits = run(images)
            if test_flip:
                # A copy before the mirrored pass: under compile mode reduce-overhead each call replays a CUDA
                # graph into the same output buffer, and in fp32 .float() would be that buffer itself.
                first = logits.to(torch.float32, copy=True)
                logits = (first + run(images.flip(-1)).float()) / 2
        logits = logits.float()
        classes = logits.shape[1]
        loss_sum += torch.nn.functional.cross_entropy(logits, targets, reduction="sum")
        k = min(5, classes)
        top = logits.topk(k, dim=1).indices
        hits = top.eq(targets[:, None])
        if classes_to is not None:
            confusion = add_pairs(confusion, targets, top[:, 0], classes)
        top1 += hits[:, :1].sum()
        top5 += hits.sum()
        count += int(targets.shape[0])
    if run is engine.runner:
        engine.compiled_step_ok()
    engine.train_mode(True)
    loss, hits1, hits5 = float(loss_sum), int(top1), int(top5)
    if dist is not None:
        loss, h1, h5, n = dist.sums(loss, hits1, hits5, count)
        hits1, hits5, count = int(h1), int(h5), int(n)
        classes = dist.max(classes or 0) or None  # a rank with an empty shard saw no logits
    if classes_to is not None:  # every rank: the sum over ranks is a collective
        classes_to(summed(confusion, classes, dist), classes or 0)
    if count == 0:
        return {"val_loss": None, "val_acc1": None, "val_acc5": None, "val_images": 0, "val_s": 0.0}
    return {"val_loss": loss / count, "val_acc1": hits1 / count,
            "val_acc5": hits5 / count if classes is not None and classes >= 5 else None,
            "val_images": count, "val_s": time.perf_counter() - started}
