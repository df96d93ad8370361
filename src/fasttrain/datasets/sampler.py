"""EpochSampler: the data order as a pure function of (seed, epoch), shardable and resumable mid-epoch.

Like torch's DistributedSampler (each rank takes every world-th index of one shared permutation, padded
or trimmed to equal length; `pad=False` for validation, where each sample must count exactly once and the
shards may differ by one), plus `set_start` so a resumed run continues at the next batch of the same
order, and a state dict that a checkpoint stores.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

# Every RNG fasttrain seeds takes 0 .. 2**32 - 1: numpy's (legacy seed, default_rng refuses negatives), random,
# torch.manual_seed (which overflows past 2**64). A seed outside it is refused, never folded.
MAX_SEED = 2**32 - 1


def check_seed(seed: object, where: str = "--seed") -> int:
    """`seed` when every RNG takes it (a whole number, 0 .. 2**32 - 1), else a UserError. Pure."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        from fasttrain.core.errors import Problem, UserError
        raise UserError([Problem(where, f"must be a whole number from 0 to {MAX_SEED:,} (2**32 - 1)",
                                 "e.g. --seed 0", seed)])
    return seed


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """Seed of the random augmentation of one sample in one epoch (a 63-bit mix; collisions are harmless)."""
    return ((seed * 1_000_003 + epoch) * 10_000_019 + index) % (2**63 - 1)


class EpochSampler:
    def __init__(self, dataset_size: int, seed: int = 0, shuffle: bool = True, rank: int = 0, world: int = 1,
                 drop_last: bool = False, pad: bool = True):
        if dataset_size <= 0:
            raise ValueError(f"dataset_size must be positive, got {dataset_size}")
        if world <= 0 or not 0 <= rank < world:
            raise ValueError(f"need 0 <= rank < world, got rank={rank} world={world}")
        self.dataset_size = dataset_size
        self.seed = seed
        self.shuffle = shuffle
        self.rank = rank
        self.world = world
        self.drop_last = drop_last
        self.pad = pad
        self.epoch = 0
        self.start = 0
        self._saved_order: tuple[int, list[int]] | None = None  # (epoch, order) restored from a checkpoint

    @property
    def num_samples(self) -> int:
        """Indices this rank sees in a whole epoch (the same on every rank, unless pad=False)."""
        if not self.pad:
            return len(range(self.rank, self.dataset_size, self.world))
        if self.drop_last:
            return self.dataset_size // self.world
        return math.ceil(self.dataset_size / self.world)

    def set_epoch(self, epoch: int) -> None:
        """Switch to `epoch`. A start position set for another epoch is dropped; for the same epoch it stays,
        so a loop may call set_epoch(e) after resuming inside epoch e."""
        if epoch != self.epoch:
            self.start = 0
        self.epoch = epoch

    def set_start(self, index: int) -> None:
        """Begin this epoch at position `index` of this rank's order (batches done x batch size)."""
        if not 0 <= index <= self.num_samples:
            raise ValueError(f"start {index} outside 0..{self.num_samples}")
        self.start = index

    def order(self, epoch: int | None = None) -> list[int]:
        """The whole permutation of the dataset for an epoch, before sharding."""
        epoch = self.epoch if epoch is None else epoch
        if self._saved_order is not None and self._saved_order[0] == epoch:
            return list(self._saved_order[1])
        if not self.shuffle:
            return list(range(self.dataset_size))
        import torch

        generator = torch.Generator()
        generator.manual_seed(self.seed + epoch)
        return torch.randperm(self.dataset_size, generator=generator).tolist()

    def rank_indices(self, epoch: int | None = None) -> list[int]:
        """This rank's indices for a whole epoch, ignoring the start position."""
        indices = self.order(epoch)
        if not self.pad:
            return indices[self.rank::self.world]
        total = self.num_samples * self.world
        if len(indices) < total:  # pad by repeating from the front, as DistributedSampler does
            repeats = math.ceil(total / len(indices))
            indices = (indices * repeats)[:total]
        else:
            indices = indices[:total]
        return indices[self.rank:total:self.world]

    def __iter__(self) -> Iterator[int]:
        return iter(self.rank_indices()[self.start:])

    def __len__(self) -> int:
        return self.num_samples - self.start

    def state_dict(self, consumed: int = 0) -> dict[str, Any]:
        """Everything needed to continue: the position and this epoch's order itself (so a torch upgrade
        that changed randperm cannot silently change the resumed order).

        `consumed`: samples the loop has trained on since this pass began (batches done x batch size). The
        sampler cannot count them itself (DataLoader workers prefetch ahead), so the stored position is
        start + consumed: right also for a run that was itself resumed mid-epoch.
        """
        position = min(self.start + consumed, self.num_samples)
        return {"seed": self.seed, "epoch": self.epoch, "start": position, "dataset_size": self.dataset_size,
                "shuffle": self.shuffle, "rank": self.rank, "world": self.world, "drop_last": self.drop_last,
                "order": self.order()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["dataset_size"] != self.dataset_size:
            raise ValueError(f"checkpoint sampler covered {state['dataset_size']} samples, this data has "
                             f"{self.dataset_size}")
        if state["world"] != self.world:
            raise ValueError(f"checkpoint sampler was sharded over {state['world']} processes, this run has "
                             f"{self.world}: the position inside the epoch would not match")
        # rank stays this process's own: rank 0 usually writes the checkpoint that every rank loads.
        for key in ("seed", "shuffle", "drop_last"):
            setattr(self, key, state[key])
        self.epoch = state["epoch"]
        self.start = state["start"]
        order = state.get("order")
        self._saved_order = (self.epoch, list(order)) if order is not None else None
