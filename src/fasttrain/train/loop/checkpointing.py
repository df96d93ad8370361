"""When the loop writes checkpoints, so that they cost a small share of the run: last.pt and the model files.

Measured on this project's 2-core machine: resnet18's last.pt (weights and AdamW state, 134 MB) took 0.7-1.4 s to
write and hash, its weights alone (45 MB) 0.2-0.5 s; with 2-second epochs, writing both every epoch more than
doubled the time to an accuracy. The policy:
  - last.pt at an epoch end when it is cheap (under CHEAP_S) or when its cost is at most SHARE of the time since
    the last one was written; always after the last epoch, at an early stop, on a stop request (SIGTERM, Ctrl-C)
    and with --save-every-minutes (signals/stop_control.py);
  - the best weights, as model.safetensors + model.json (their one copy in the run folder: no best.pt), with every
    last.pt written after a new best, and at the end: they wait in memory (a copy on the host, taken at each new
    best) until then, so a long run keeps its best model and a short one writes it once. A run that validated no
    epoch writes its last weights there at the end;
  - one copy of the weights: the final last.pt of a run whose last epoch is its best refers to model.safetensors
    for those tensors (models/saved.py), written first. While it is replaced, the one a last.pt on disk refers to
    stays as a hard link (saved.PREVIOUS_FILE) until the new last.pt is down; where none can be made, a whole
    last.pt goes first: a last.pt never meets weights other than its own;
  - no last.pt with checkpoint.save_last false (--no-last): the model files only;
  - epoch_N.pt every N epochs with --save-every, as asked (whole files).
The cost of a write is estimated from its bytes until one was measured, then measured (the slower of the two).
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from fasttrain.models import saved
from fasttrain.train.loop.weak_sink import weak_sink
from fasttrain.train.state.checkpoint_policy import CheckpointPolicy, weights_payload
from fasttrain.train.state.integrity import to_host
from fasttrain.train.state.rng import restore_rng_states
from fasttrain.train.state.run_state import RunState

if TYPE_CHECKING:
    from fasttrain.train.parallel.ddp import DistContext

SHARE = 0.02                  # of the time since the last write, at most, spent writing the next one
CHEAP_S = 0.05                # a write this cheap (a small model's) is made at every epoch end
WRITE_BYTES_PER_S = 200e6     # torch.save + SHA-256 + fsync before one was measured (measured here: 100-200 MB/s)
WEIGHT_ENTRIES = (("model", ""), ("ema", "module."))  # a checkpoint's weights, and the prefix of their names


def write_due(since_last_s: float, cost_s: float) -> bool:
    """An epoch-end write of last.pt is due: cheap, or at most SHARE of the time since the last one. Pure."""
    return cost_s <= CHEAP_S or cost_s <= SHARE * since_last_s


def same_weights(entry: object, weights: dict[str, Any], prefix: str) -> bool:
    """A checkpoint's entry holds exactly `weights` (its names with `prefix`), tensor for tensor. Pure."""
    if not isinstance(entry, dict) or entry.keys() != {prefix + name for name in weights}:
        return False
    return all(torch.is_tensor(entry[prefix + name]) and torch.is_tensor(value) and
               entry[prefix + name].dtype == value.dtype and torch.equal(entry[prefix + name], value)
               for name, value in weights.items())


def state_bytes(state: dict[str, Any]) -> int:
    """Bytes of the tensors inside a (nested) state dict: what a checkpoint of it weighs, near enough."""
    if torch.is_tensor(state):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(state_bytes(v) for v in state.values())
    if isinstance(state, (list, tuple)):
        return sum(state_bytes(v) for v in state)
    return 0


class Checkpointer:
    """Writes the run's checkpoints by the policy above (rank 0: the one with a CheckpointPolicy)."""

    def __init__(self, policy: CheckpointPolicy | None, warn: Callable[[str], None],
                 clock: Callable[[], float] = time.monotonic):
        self.policy = policy
        self.warn = weak_sink(warn)  # the Trainer's own method: held weakly, no cycle keeping the Trainer alive
        self.clock = clock
        self.last_good: Path | None = None      # newest checkpoint known to be complete
        self.errors: list[str] = []
        self.best: dict[str, Any] | None = None  # the best weights not written yet (a weights_payload)
        self.write_s: float | None = None        # the last measured write of last.pt (+ best.pt), seconds
        self.last_write = clock()

    def new_best(self, model: torch.nn.Module, epoch: int, val_acc1: float | None) -> None:
        """Keep the best weights (a host copy: training goes on changing the model's own tensors), copied in one go
        (to_host: no blocking copy, and on a GPU no sync, per tensor)."""
        weights = to_host(model.state_dict(), copy=True)
        self.best = weights_payload(weights, epoch=epoch, val_acc1=val_acc1)

    def due(self, state: RunState) -> bool:
        """Whether an epoch-end write is worth its cost now."""
        estimate = state_bytes(state.model) + state_bytes(state.optimizer) if self.policy is None or \
            self.policy.keep_last else 0
        if self.best is not None:
            estimate += state_bytes(self.best["model"])
        cost = max(estimate / WRITE_BYTES_PER_S, self.write_s or 0.0)
        return write_due(self.clock() - self.last_write, cost)

    def write(self, state: RunState, *, epoch: int | None = None, final: bool = False) -> Path | None:
        """last.pt now, and the model files when new best weights wait (`final`: the run's last write; the last
        weights when no epoch was validated); epoch_N.pt after epoch `epoch` when --save-every asks -> last.pt, or
        None when there is no policy or last.pt, or the disk refused it. Every refusal is warned once."""
        self.last_write = self.clock()
        if self.policy is None:
            return None
        started = time.perf_counter()
        payload = to_host(state.to_payload())  # once: compared with the best weights, then saved from the host
        kept = self.best
        if kept is None and final and state.fit.best_epoch is None:  # nothing validated: the last weights
            kept = weights_payload(payload["model"], epoch=state.position.epoch, val_acc1=None, best=False)
        written = self._write_files(payload, kept, final)
        if epoch is not None:
            self.policy.save_numbered(payload, epoch)
        self.write_s = time.perf_counter() - started
        self.last_write = self.clock()
        if written is not None:
            self.last_good = written
        for text in self.policy.errors[len(self.errors):]:
            self.errors.append(text)
            self.warn(text)
        return written

    def _write_files(self, payload: dict[str, Any], kept: dict[str, Any] | None, final: bool) -> Path | None:
        """last.pt and the model files, in the order that keeps each last.pt on disk loadable (module docstring)."""
        policy = self.policy
        assert policy is not None
        if not policy.keep_last:
            self._keep(kept)
            return None
        previous = policy.directory / saved.PREVIOUS_FILE
        same = [(entry, prefix) for entry, prefix in WEIGHT_ENTRIES
                if kept is not None and same_weights(payload.get(entry), kept["model"], prefix)]
        if final and same and (not self._last_refers() or self._keep_previous(previous)):
            # the model files first (the weights the last.pt on disk refers to kept as PREVIOUS_FILE meanwhile),
            # then a last.pt that refers to them; a whole one when they could not be written
            written = policy.save_last({**payload, **{entry: saved.reference(policy.directory, prefix)
                                                      for entry, prefix in same}} if self._keep(kept) else payload)
        else:
            written = policy.save_last(payload)
            if written is not None:
                self._keep(kept)
        if written is not None:
            previous.unlink(missing_ok=True)  # no last.pt on disk refers to it now
        return written

    @staticmethod
    def _keep_previous(previous: Path) -> bool:
        """model.safetensors also as `previous` (a hard link: no copy) -> whether it is there now; not over an
        earlier one (a last.pt on disk may still refer to it) nor where links are not supported."""
        if previous.exists():
            return False
        try:
            os.link(previous.parent / saved.WEIGHTS_FILE, previous)
        except OSError:
            return False
        return True

    def _keep(self, kept: dict[str, Any] | None) -> bool:
        """The model files from `kept` (none waiting: nothing to do) -> whether they are on disk now."""
        if kept is None or self.policy is None or self.policy.save_model(kept) is None:
            return kept is None
        if kept is self.best:
            self.best = None
        return True

    def _last_refers(self) -> bool:
        """Whether the last.pt on disk keeps an entry in model.safetensors (which then must not change first)."""
        assert self.policy is not None
        try:
            payload = torch.load(self.policy.directory / "last.pt", map_location="cpu", weights_only=False, mmap=True)
        except Exception:
            return False
        return isinstance(payload, dict) and any(saved.is_reference(v) for v in payload.values())

    def expected_s(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> float:
        """Seconds the final write (last.pt and the model files) is expected to take: measured, or from its bytes."""
        estimate = (2 * state_bytes(model.state_dict()) + state_bytes(optimizer.state_dict())) / WRITE_BYTES_PER_S
        return max(estimate, self.write_s or 0.0)


def restore_rank_rng(state: RunState, dist: DistContext | None) -> None:
    """This process's RNG states from the checkpoint: its own rank's under DDP when the world is the same size."""
    if state.rng is None:
        return
    per_rank = state.rng_per_rank or []
    own = per_rank[dist.rank] if dist is not None and len(per_rank) == dist.size else None
    restore_rng_states(own or state.rng)
