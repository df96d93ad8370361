"""Issue 39 item 6: under DDP the batch-norm statistics re-estimated before validation are one set for all ranks.

Two real gloo processes (torch.multiprocessing, localhost), each holding different recent batches (2 on rank 0,
3 on rank 1; then none on rank 1): after validation's re-estimate both ranks hold the same running statistics,
those one process re-estimating on the union of the batches gets. Before the fix each rank kept its own, so the
accuracy summed over ranks mixed two sets of statistics while best.pt kept rank 0's.
"""
from __future__ import annotations

import socket
from pathlib import Path

import torch
import torch.multiprocessing as mp
from loop_helpers import cpu_plan

from fasttrain.train.loop.norm_stats import RecentBatches, recalibrate, training_norms

# Rank -> the seeds of its recent batches, per scenario.
SCENARIOS = {"unequal": ([0, 1], [2, 3, 4]), "one_empty": ([5, 6], [])}


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.Conv2d(4, 5, 3, padding=1), torch.nn.BatchNorm2d(5), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(5, 3))


def _batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    # Each seed its own offset, so the ranks' statistics differ clearly.
    return torch.randn(8, 3, 6, 6, generator=g) * (1 + seed) + seed, torch.randint(0, 3, (8,), generator=g)


def _stats(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items() if "running_" in k}


def _rank(rank: int, port: int, out: str) -> None:
    import os
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    from fasttrain.train.loop.step import StepEngine
    from fasttrain.train.loop.validation import evaluate
    from fasttrain.train.parallel import ddp
    from fasttrain.train.types import WorkerWorld

    plan, profile = cpu_plan(loader={"batch_size": 8, "num_workers": 0, "image_size": 6},
                             speed={"precision": "fp32", "channels_last": False, "compile": False})
    results = {}
    with ddp.joined(WorkerWorld(rank, rank, 2, 2), "cpu") as ctx:
        for name, seeds in SCENARIOS.items():
            engine = StepEngine.build(plan, profile.optim, _net(), batches_per_epoch=1, dist=ctx)
            recent = RecentBatches(1000)
            for seed in seeds[rank]:
                recent.add(_batch(seed))
            row = evaluate(engine, [_batch(50 + rank)], dist=ctx, norms=recent)
            results[name] = {"stats": _stats(engine.module), "acc": row["val_acc1"]}
    torch.save(results, Path(out) / f"rank{rank}.pt")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_both_ranks_validate_with_the_statistics_of_all_their_batches(tmp_path: Path) -> None:
    mp.spawn(_rank, args=(_free_port(), str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    for name, seeds in SCENARIOS.items():
        union = _net().train()
        recent = RecentBatches(1000)
        for seed in seeds[0] + seeds[1]:
            recent.add(_batch(seed))
        recalibrate(union, training_norms(union), recent, lambda x, y: (x, y), torch.no_grad)
        expected = _stats(union)
        first, second = (r[name]["stats"] for r in ranks)
        assert first.keys() == expected.keys() and len(expected) == 4
        for key, value in expected.items():
            assert torch.equal(first[key], second[key]), f"{name}: rank 0 and rank 1 differ in {key}"
            torch.testing.assert_close(first[key], value, rtol=1e-5, atol=1e-6, msg=f"{name}: {key}")
        assert ranks[0][name]["acc"] == ranks[1][name]["acc"]  # the summed accuracy, the same on both
