"""Out-of-memory back-off: how many micro-batches a loader batch runs as, and the record of each halving.

A micro-step that runs out of memory is retried by the step engine (step.py) on the same data as micro-batches
of half the size (twice the accumulation), keeping the effective batch and the LR. An optimizer step that runs
out of memory (the first one allocates the optimizer state) is retried once on the same gradients after the
allocator's cache is freed, with per-parameter updates where it used multi-tensor ones (no full-size temporaries):
a smaller batch would not help it, activations are gone by then. torch's optimizers update their param groups one
after the other, so the error may come after some groups were updated: the retry steps only the groups the failed
attempt left untouched (group_marks), so no parameter is updated twice. Off under DDP (one rank cannot change the
batch alone) and in the batch search (it must see the out-of-memory error itself).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import torch

from fasttrain.core.errors import JobFailed
from fasttrain.train.loop.oom import free_device_memory, is_out_of_memory


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

    def retry_optimizer_step(self, run: Callable[[], None], optimizer: torch.optim.Optimizer,
                             device: torch.device, schedule: _Schedule, at: tuple[int, int, int]) -> None:
        """`run()` (the precision's optimizer step); out of memory once: freed, leaner, retried on the same
        gradients for the param groups the failed attempt had not reached, recorded and said. A second time, or
        with the back-off off, is the error (JobFailed when nothing is left to try). `at`: (epoch, batch index,
        samples in the batch), 0-based."""
        marks, states = group_marks(optimizer), len(optimizer.state)
        try:
            run()
            return
        except Exception as exc:
            if not self.enabled or not is_out_of_memory(exc):
                raise
            reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        free_device_memory(device)  # outside the except block: the failed step's frames are gone
        left = [i for i, mark in enumerate(group_marks(optimizer)) if mark == marks[i]]
        forget_fresh_state(optimizer, left, states)
        for leftover in ("grad_scale", "found_inf"):  # GradScaler.step sets them around a fused step and does not
            if leftover in vars(optimizer):             # take them back when it fails: the retry's scale would be
                delattr(optimizer, leftover)            # multiplied by the stale one
        lean = per_parameter_updates(optimizer)
        epoch, index, batch = at
        where = f"step {schedule.step + 1} (epoch {epoch + 1}, batch {index + 1})"
        micro = -(-batch // self.splits)
        done = len(marks) - len(left)
        self.events.append({"epoch": epoch + 1, "batch": index + 1, "step": schedule.step + 1, "batch_from": micro,
                            "batch_to": micro, "stage": "optimizer step", "remedy": lean or "cache freed",
                            "groups_retried": len(left), "effective_batch": self.effective_batch,
                            "lr": schedule.current()})
        retried = "retried on the same gradients after freeing cached memory" if left else "cached memory freed"
        reached = f"; {done} of {len(marks)} param groups had been updated (or begun) and are not updated again" \
            if done else ""
        self.warn(f"out of memory in the optimizer step at {where} ({reason}): {retried}"
                  f"{', with ' + lean if lean else ''}{reached}; batch unchanged")
        aside = set_grads_aside(optimizer, left)
        try:  # run even with no group left: the precision's step ends (GradScaler.update, the guard's record)
            run()
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            raise JobFailed(f"out of memory in the optimizer step at {where}, again after freeing cached memory: "
                            "the weights, their gradients and the optimizer state do not fit (SGD with momentum "
                            "keeps 1x the weights, Adam/AdamW 2x); use a smaller model, optim.optimizer=sgd, or "
                            "a GPU with more memory") from None
        finally:
            for p, grad in aside:
                p.grad = grad

    def state_dict(self) -> dict[str, Any]:
        """The micro-batches per loader batch and the halvings so far, under a checkpoint's own keys."""
        return {"micro_batch_splits": self.splits, "oom_events": list(self.events)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """A resumed run keeps the micro-batch its checkpoint trained with (a missing entry: none split)."""
        self.splits = max(1, int(state.get("micro_batch_splits") or 1))
        self.events = list(state.get("oom_events") or [])


def per_parameter_updates(optimizer: torch.optim.Optimizer) -> str | None:
    """Switch multi-tensor (foreach) param groups to one update per parameter: the foreach path builds full-size
    temporaries (weight decay added to every gradient at once), the loop one tensor at a time. Fused groups stay
    fused (their kernels allocate nothing extra, and GradScaler hands them its scale). -> what changed, or None."""
    changed = False
    for group in optimizer.param_groups:
        if not group.get("fused") and group.get("foreach") is not False:
            group["foreach"] = False
            changed = True
    return "per-parameter updates from now on (no multi-tensor temporaries)" if changed else None


def group_marks(optimizer: torch.optim.Optimizer) -> list[tuple[Any, ...]]:
    """For each param group, whether an optimizer step has begun on it: the in-place version counters
    (`Tensor._version`, one more for each in-place change) of its first parameter with a gradient and of that
    parameter's optimizer state (a state tensor not changed since it was made counts as no state: the lazy start
    of a group that was not updated). torch steps the groups one after the other, and in a group changes the first
    parameter first or with all the others (multi-tensor and fused kernels, their device/dtype buckets in the
    parameters' order): a mark that changed says the step reached that group. A few counters a group cost
    microseconds a step, where every parameter's would cost 0.1 ms. `_version` is private but stable:
    autograd's check that a tensor saved for backward was not changed since rests on it."""
    marks = []
    for group in optimizer.param_groups:
        first = next((p for p in group["params"] if p.grad is not None), None)
        state = optimizer.state.get(first) if first is not None else None
        marks.append((None,) if first is None else
                     (first._version, *((id(v), v._version) for v in (state or {}).values()
                                         if isinstance(v, torch.Tensor) and v._version)))
    return marks


def forget_fresh_state(optimizer: torch.optim.Optimizer, groups: list[int], before: int) -> None:
    """Drop the optimizer state a failed step began for the parameters of `groups` (it made it, changed nothing
    with it, and may have stopped half-way: Adam's exp_avg without its exp_avg_sq). `before`: how many parameters
    had state before the step; torch's state dict keeps the order it was filled in."""
    fresh = list(optimizer.state)[before:]
    if not fresh:
        return
    retried = {id(p) for i in groups for p in optimizer.param_groups[i]["params"]}
    for p in fresh:
        if id(p) in retried:
            del optimizer.state[p]


def set_grads_aside(optimizer: torch.optim.Optimizer, keep: list[int]) -> list[tuple[torch.Tensor, Any]]:
    """Gradients of the param groups not in `keep` set to None (an optimizer skips such parameters) ->
    (parameter, gradient) pairs to give back."""
    aside = [(p, p.grad) for i, group in enumerate(optimizer.param_groups) if i not in keep for p in group["params"]]
    for p, _ in aside:
        p.grad = None
    return aside


def take_grads(params: list[torch.Tensor]) -> list[torch.Tensor | None]:
    """Move the gradients accumulated so far aside (no copy), so a failed micro-step can be undone."""
    stash = [p.grad for p in params]
    for p in params:
        p.grad = None
    return stash


def give_back_grads(params: list[torch.Tensor], stash: list[torch.Tensor | None], keep_new: bool) -> None:
    """Add the stashed gradients back (new + old: IEEE addition is commutative, so the bits equal autograd's own
    old + new), or drop the new partial ones after a failure."""
    for p, old in zip(params, stash, strict=True):
        if not keep_new or p.grad is None:
            p.grad = old
        elif old is not None:
            p.grad.add_(old)
