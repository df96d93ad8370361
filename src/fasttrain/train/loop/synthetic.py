"""Timing the real training step on random tensors: `estimate --measure`, the batch search and the benchmarks."""
from __future__ import annotations

import resource
import time
from collections.abc import Callable

import torch

from fasttrain.plan import Plan
from fasttrain.profiles.schema import OptimSpec
from fasttrain.train.loop.events import Collaborators
from fasttrain.train.loop.step import StepEngine
from fasttrain.train.loop.trainer import Trainer


def run_synthetic_steps(plan: Plan, model: torch.nn.Module, *, image_size: int, num_classes: int, steps: int,
                        warmup_steps: int, optim: OptimSpec | None = None, in_chans: int = 3,
                        warn: Callable[[str], None] | None = None) -> dict[str, float]:
    """Time `steps` training steps of the real step code on random tensors made on the device.

    Warm-up steps (compilation, cudnn autotuning, allocator growth) are not timed. -> images_per_s,
    step_time_s (seconds per loader batch: forward + backward, optimizer step at each window's end) and
    peak_memory_bytes (CUDA: peak allocated by tensors; CPU: the process's peak resident set).
    """
    from fasttrain.datasets.build import SyntheticBatches

    optim = optim or OptimSpec()
    engine = StepEngine.build(plan, optim, model, batches_per_epoch=warmup_steps + steps,
                              warn=warn or (lambda text: None), oom_backoff=False)
    trainer = Trainer(engine, collaborators=Collaborators(warn=warn or (lambda text: None)))
    device = engine.device
    # The very loop `train --data synthetic` runs (train_epoch over SyntheticBatches, with its non-finite guard
    # and bookkeeping), so --measure differs from a real run only by what a run adds around the steps.
    data = SyntheticBatches(plan.batch_size, image_size, num_classes, device, warmup_steps + steps,
                            channels=in_chans)
    if warmup_steps:
        trainer.train_epoch(data, 0, batches=warmup_steps)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    trainer.train_epoch(data, 0, batches=steps)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = max(time.perf_counter() - started, 1e-9)
    if device.type == "cuda":
        peak = int(torch.cuda.max_memory_allocated(device))
    else:
        peak = int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux reports KiB
    return {"images_per_s": steps * plan.batch_size / elapsed, "step_time_s": elapsed / max(1, steps),
            "peak_memory_bytes": peak}
