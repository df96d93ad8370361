"""Out-of-memory back-off: a micro-step that runs out of memory is retried on the same data as micro-batches
of half the size (twice the accumulation), keeping the effective batch and the LR. Off under DDP (one rank
cannot change the batch alone) and in run_synthetic_steps (the batch search must see the OOM itself)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fasttrain.core.errors import JobFailed
from fasttrain.train.loop.oom import free_device_memory, is_out_of_memory
from fasttrain.train.loop.optim import LRSchedule
from fasttrain.train.loop.step import StepEngine


class OomBackoff:
    def __init__(self, engine: StepEngine, schedule: LRSchedule, *, accumulation: int, effective_batch: int,
                 warn: Callable[[str], None], enabled: bool = True):
        self.engine = engine
        self.schedule = schedule
        self.accumulation = accumulation          # the plan's accumulation steps (before any back-off)
        self.effective_batch = effective_batch    # samples per optimizer step over all ranks: kept as it is
        self.warn = warn
        self.enabled = enabled
        self.events: list[dict[str, Any]] = []    # one per halving, kept in checkpoints and the summary

    def forward_backward(self, images: torch.Tensor, targets: torch.Tensor, window: int, first_in_window: bool,
                         epoch: int, index: int, sync: bool = True) -> torch.Tensor:
        """engine.forward_backward, retried on the same data as smaller micro-batches while it runs out of
        memory. `first_in_window`: no earlier gradients of this accumulation window to keep aside."""
        engine = self.engine
        while True:
            stash = None if first_in_window else engine.take_grads()
            try:
                loss = engine.forward_backward(images, targets, window, sync)
            except Exception as exc:  # noqa: BLE001 - only out-of-memory is handled, the rest re-raised
                if not self.enabled or not is_out_of_memory(exc):
                    raise
                reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
            else:
                if stash is not None:
                    engine.give_back_grads(stash, keep_new=True)
                return loss
            # Outside the except block: the exception and the frames holding the step's tensors are gone.
            if stash is not None:
                engine.give_back_grads(stash, keep_new=False)
            else:
                engine.optimizer.zero_grad(set_to_none=True)
            free_device_memory(engine.device)
            self._halve(int(targets.shape[0]), epoch, index, reason)

    def _halve(self, batch: int, epoch: int, index: int, reason: str) -> None:
        engine = self.engine
        before = engine.micro_batch(batch)
        where = f"step {self.schedule.step + 1} (epoch {epoch + 1}, batch {index + 1})"
        if before <= 1:
            raise JobFailed(f"out of memory at {where} with a per-device batch of 1 ({reason}); nothing left to "
                            "halve: use a smaller model or loader.image_size, or set "
                            "speed.activation_checkpointing=true")
        engine.splits *= 2
        after = engine.micro_batch(batch)
        acc_before, acc_after = self.accumulation * engine.splits // 2, self.accumulation * engine.splits
        effective = self.effective_batch
        self.events.append({"epoch": epoch + 1, "batch": index + 1, "step": self.schedule.step + 1,
                            "batch_from": before, "batch_to": after, "accumulation_from": acc_before,
                            "accumulation_to": acc_after, "effective_batch": effective,
                            "lr": self.schedule.current()})
        self.warn(f"out of memory at {where}: per-device batch {before} -> {after}, accumulation {acc_before} -> "
                  f"{acc_after}; effective batch {effective} and LR {self.schedule.current():.4g} unchanged, "
                  "same data retried")
