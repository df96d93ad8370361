"""What data-parallel training costs and gives on this machine, measured side by side in one run.

1. The DDP code path's own cost: the real Trainer over the same in-memory batches, once as a plain process and
   once inside a world of one (gloo process group, DistributedDataParallel, the async stop vote, summed
   metrics): what a one-GPU `--nproc-per-node 1` run pays. Rounds alternate which side goes first; the figures
   are the median over rounds of (DDP images/s) / (plain images/s) and of the extra milliseconds per step.
   Target: ratio >= 0.95 for resnet18 @64 px, batch 16 (a tiny_cnn step of a few ms shows the fixed cost).
2. Scaling: `fasttrain train --data synthetic` (one epoch: 10,000 samples) as 1 process vs `--nproc-per-node 2`,
   the same global batch, images/s from each run's summary.json (steps only, start-up excluded).
   Interleaved runs, medians. On a 2-core CPU both use the same two cores, so this shows the price of
   gradient all-reduce over gloo rather than a speed-up; on a GPU machine each process gets its own GPU.

  .venv/bin/python benchmarks/ddp_overhead.py [--rounds 15] [--runs 3] [--model tiny_cnn] [--skip-scaling]
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fasttrain.hardware.machine import probe  # noqa: E402
from fasttrain.models.registry import create_model  # noqa: E402
from fasttrain.plan import make_plan  # noqa: E402
from fasttrain.profiles.presets import resolve  # noqa: E402
from fasttrain.train.loop.step import StepEngine  # noqa: E402
from fasttrain.train.loop.trainer import Trainer  # noqa: E402
from fasttrain.train.parallel import ddp as distributed  # noqa: E402
from fasttrain.train.types import WorkerWorld  # noqa: E402

TARGET = 0.95


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _images_per_s(trainer: Trainer, batches: list) -> float:
    started = time.perf_counter()
    row = trainer.train_epoch(batches, 0)
    return row["train_images"] / (time.perf_counter() - started)


def code_path(model_name: str, rounds: int, batches_per_round: int, batch: int, size: int) -> tuple[list, list]:
    """-> (ratios DDP / plain of images/s, extra seconds per step of DDP), one per round."""
    profile = resolve("cpu", sets=[f"loader.batch_size={batch}", f"loader.image_size={size}"]).profile
    plan = make_plan(profile, probe())
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(batch, 3, size, size, generator=g), torch.randint(0, 10, (batch,), generator=g))
               for _ in range(batches_per_round)]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    with distributed.joined(WorkerWorld(0, 0, 1, 1), "cpu") as ctx:
        torch.manual_seed(0)
        plain = Trainer(StepEngine.build(plan, profile.optim, create_model(model_name, 10),
                                         batches_per_epoch=batches_per_round))
        torch.manual_seed(0)
        ddp = Trainer(StepEngine.build(plan, profile.optim, create_model(model_name, 10),
                                       batches_per_epoch=batches_per_round, dist=ctx), dist=ctx)
        for t in (plain, ddp):  # warm-up: allocator, oneDNN primitives, DDP's bucket rebuild
            t.train_epoch(batches[:2], 0)
        ratios, extra = [], []
        for r in range(rounds):
            order = (plain, ddp) if r % 2 == 0 else (ddp, plain)
            speed = {id(t): _images_per_s(t, batches) for t in order}
            ratios.append(speed[id(ddp)] / speed[id(plain)])
            extra.append(batch / speed[id(ddp)] - batch / speed[id(plain)])
    return ratios, extra


def _train(root: Path, name: str, nproc: int, args: list[str]) -> float:
    cmd = [sys.executable, "-m", "fasttrain", "train", *args, "--run-name", name, "--runs-dir", str(root), "--quiet"]
    if nproc > 1:
        cmd += ["--nproc-per-node", str(nproc)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return json.loads((root / name / "summary.json").read_text())["train_images_per_s"]


def scaling(model_name: str, runs: int, global_batch: int, size: int) -> dict[int, list[float]]:
    # No loader workers (synthetic data needs none), so one process computes on every core and two get one each.
    common = ["--profile", "cpu", "--data", "synthetic", "--model", model_name, "--epochs", "1",
              "--image-size", str(size), "--num-classes", "10", "--set", "loader.num_workers=0",
              "--set", "loader.prefetch_factor=null", "--set", "loader.persistent_workers=false"]
    speeds: dict[int, list[float]] = {1: [], 2: []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for r in range(runs):
            for nproc in ((1, 2) if r % 2 == 0 else (2, 1)):
                args = [*common, "--set", f"loader.batch_size={global_batch // nproc}"]
                speeds[nproc].append(_train(root, f"n{nproc}-{r}", nproc, args))
    return speeds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--model", default="tiny_cnn", help="model of the scaling runs")
    ap.add_argument("--skip-scaling", action="store_true")
    a = ap.parse_args()
    print(f"DDP code path, world of one vs plain, {a.rounds} interleaved rounds x {a.batches} steps")
    failed = False
    for model, batch, size, target in (("tiny_cnn", 32, 32, None), ("resnet18", 16, 64, TARGET)):
        ratios, extra = code_path(model, a.rounds, a.batches, batch=batch, size=size)
        median = statistics.median(ratios)
        print(f"  {model:9s} @{size} px b{batch}: ratio DDP / plain images/s median {median:.3f} "
              f"(min {min(ratios):.3f}, "
              f"max {max(ratios):.3f}), extra per step {statistics.median(extra) * 1e3:+.2f} ms"
              + (f"; target >= {target}" if target else ""))
        if target is not None and median < target:
            failed = True
            print(f"FAILED: DDP code path ratio {median:.3f} < {target} for {model}")
    if not a.skip_scaling:
        speeds = scaling(a.model, a.runs, global_batch=64, size=32)
        one, two = statistics.median(speeds[1]), statistics.median(speeds[2])
        print(f"scaling, {a.model} @32 px, global batch 64, one synthetic epoch, {a.runs} interleaved runs each "
              "(images/s)")
        print(f"  1 process:            median {one:8.1f}  runs {', '.join(f'{v:.1f}' for v in speeds[1])}")
        print(f"  2 processes (gloo):   median {two:8.1f}  runs {', '.join(f'{v:.1f}' for v in speeds[2])}")
        print(f"  2 / 1: {two / one:.2f}x on {len(os.sched_getaffinity(0))} cores")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
