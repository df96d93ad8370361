"""EpochSampler: order = f(seed, epoch), sharding like DistributedSampler, exact mid-epoch resume."""
from __future__ import annotations

import pytest
import torch

from fasttrain.datasets.sampler import EpochSampler


def test_order_is_a_pure_function_of_seed_and_epoch() -> None:
    a, b = EpochSampler(50, seed=3), EpochSampler(50, seed=3)
    a.set_epoch(2)
    b.set_epoch(2)
    assert list(a) == list(b) and sorted(a) == list(range(50))
    a.set_epoch(3)
    assert list(a) != list(b)
    assert list(EpochSampler(50, seed=4)) != list(EpochSampler(50, seed=3))
    g = torch.Generator().manual_seed(3 + 2)
    assert list(b) == torch.randperm(50, generator=g).tolist()


def test_no_shuffle_is_file_order() -> None:
    assert list(EpochSampler(5, shuffle=False)) == [0, 1, 2, 3, 4]


def test_shards_are_disjoint_and_cover_the_data() -> None:
    shards = [list(EpochSampler(10, seed=1, rank=r, world=3)) for r in range(3)]
    assert all(len(s) == 4 for s in shards)  # ceil(10 / 3), padded like DistributedSampler
    assert set().union(*map(set, shards)) == set(range(10))
    trimmed = [list(EpochSampler(10, seed=1, rank=r, world=3, drop_last=True)) for r in range(3)]
    assert all(len(s) == 3 for s in trimmed)
    flat = [i for s in trimmed for i in s]
    assert len(set(flat)) == 9


def test_resume_at_next_batch_equals_the_tail_of_the_uninterrupted_order() -> None:
    batch, done = 4, 3
    full = EpochSampler(30, seed=7, drop_last=True)
    full.set_epoch(1)
    uninterrupted = list(full)

    running = EpochSampler(30, seed=7, drop_last=True)
    running.set_epoch(1)
    running.set_start(done * batch)
    state = running.state_dict()

    resumed = EpochSampler(30, seed=0, drop_last=True)
    resumed.load_state_dict(state)
    resumed.set_epoch(1)  # the loop calls this at the top of the epoch; the start position must survive
    assert list(resumed) == uninterrupted[done * batch:]
    assert len(resumed) == 30 - done * batch
    resumed.set_epoch(2)  # the next epoch starts from its beginning with its own order
    full.set_epoch(2)
    assert list(resumed) == list(full)


def test_interrupted_twice_adds_up_the_position() -> None:
    """Resumed at batch 2, stopped again 3 batches later: the next resume starts at batch 5."""
    full = EpochSampler(40, seed=2)
    expected = list(full)[5 * 4:]
    first = EpochSampler(40, seed=2)
    state = first.state_dict(consumed=2 * 4)
    second = EpochSampler(40, seed=2)
    second.load_state_dict(state)
    state = second.state_dict(consumed=3 * 4)
    third = EpochSampler(40, seed=2)
    third.load_state_dict(state)
    assert third.start == 20 and list(third) == expected


def test_state_keeps_the_saved_order() -> None:
    """A checkpoint's order wins over recomputing it (randperm may change across torch versions)."""
    sampler = EpochSampler(6, seed=0)
    state = sampler.state_dict()
    state["order"] = [5, 4, 3, 2, 1, 0]
    state["start"] = 2
    sampler.load_state_dict(state)
    assert list(sampler) == [3, 2, 1, 0]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        EpochSampler(0)
    with pytest.raises(ValueError):
        EpochSampler(10, rank=2, world=2)
    with pytest.raises(ValueError):
        EpochSampler(10).set_start(11)
    state = EpochSampler(10, world=2).state_dict()
    with pytest.raises(ValueError, match="sharded over 2"):
        EpochSampler(10).load_state_dict(state)
