"""Out-of-memory back-off: how many micro-batches a loader batch runs as, and the record of each halving.

A micro-step that runs out of memory is retried by the step engine (step.py) on the same data as micro-batches
of half the size (twice the accumulation), keeping the effective batch and the LR. Off under DDP (one rank
cannot change the batch alone) and in the batch search (it must see the out-of-memory error itself).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from fasttrain.core.errors import JobFailed


class _Schedule(Protocol):
    step: int

    def current(self) -> float: ...


class OomBackoff:
    def __init__(self, effective_batch: int, warn: Callable[[str], None], *, enabled: bool = True):
        self.effective_batch = effective_batch    # samples per optimizer step over all ranks: kept as it is
        self.warn = warn
        self.enabled = enabled
        self.splits = 1                           # micro-batches per loader batch
        self.events: list[dict[str, Any]] = []    # one per halving, kept in checkpoints and the summary

    def halve(self, batch: int, accumulation: int, schedule: _Schedule, where: tuple[int, int], reason: str) -> None:
        """After an out-of-memory error on a loader batch of `batch` samples at (epoch, batch index), 0-based:
        twice the micro-batches from now on, recorded and said. `accumulation`: the plan's (before back-off)."""
        before = -(-batch // self.splits)
        epoch, index = where
        at = f"step {schedule.step + 1} (epoch {epoch + 1}, batch {index + 1})"
        if before <= 1:
            raise JobFailed(f"out of memory at {at} with a per-device batch of 1 ({reason}); nothing left to "
                            "halve: use a smaller model or loader.image_size, or set "
                            "speed.activation_checkpointing=true")
        self.splits *= 2
        after = -(-batch // self.splits)
        acc_before, acc_after = accumulation * self.splits // 2, accumulation * self.splits
        lr = schedule.current()
        self.events.append({"epoch": epoch + 1, "batch": index + 1, "step": schedule.step + 1,
                            "batch_from": before, "batch_to": after, "accumulation_from": acc_before,
                            "accumulation_to": acc_after, "effective_batch": self.effective_batch, "lr": lr})
        self.warn(f"out of memory at {at}: per-device batch {before} -> {after}, accumulation {acc_before} -> "
                  f"{acc_after}; effective batch {self.effective_batch} and LR {lr:.4g} unchanged, same data retried")

    def restore(self, splits: int, events: list[dict[str, Any]]) -> None:
        """A resumed run keeps the micro-batch its checkpoint trained with."""
        self.splits, self.events = max(1, splits), list(events)
