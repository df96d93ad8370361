"""What fasttrain's loop costs over a minimal hand-written PyTorch loop: target ratio >= 0.97.

One process, same model architecture and initial weights, same in-memory batches, same settings (the cpu
profile's: channels_last, bf16 autocast, AdamW). fasttrain's side is the real Trainer.train_epoch with
Telemetry running, the Dashboard in plain mode writing to a null stream and a RunLog (metrics.jsonl and
TensorBoard) in a temporary directory. The hand loop is the textbook five lines. Rounds alternate which side
goes first; the reported figure is the median over rounds of (fasttrain images/s) / (hand loop images/s),
by this process's CPU time (robust to other jobs on a shared machine) and by the wall clock.

  .venv/bin/python benchmarks/loop_overhead.py [--rounds 30] [--batches 10] [--threads 1]
"""
from __future__ import annotations

import argparse
import copy
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from fasttrain.dashboard import Dashboard
from fasttrain.optim import param_groups
from fasttrain.plan import make_plan
from fasttrain.presets import resolve
from fasttrain.runlog import RunLog
from fasttrain.telemetry import Telemetry
from fasttrain.tiny_models import tiny_cnn
from fasttrain.hardware import probe
from fasttrain.trainer import Collaborators, Trainer


class NullStream(io.TextIOBase):
    def write(self, s: str) -> int:
        return len(s)

    def isatty(self) -> bool:
        return False


def _timed(fn) -> tuple[float, float]:  # noqa: ANN001
    """-> (images/s by the wall clock, images/s by this process's CPU time)."""
    wall, cpu = time.perf_counter(), time.process_time()
    images = fn()
    return images / (time.perf_counter() - wall), images / (time.process_time() - cpu)


def hand_loop(model, optimizer, batches) -> int:  # noqa: ANN001
    for images, targets in batches:
        images = images.to(memory_format=torch.channels_last)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(images)
        loss = F.cross_entropy(logits.float(), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return sum(len(t) for _, t in batches)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--batches", type=int, default=10, help="batches per side per round")
    ap.add_argument("--threads", type=int, default=1, help="torch compute threads, both sides")
    args = ap.parse_args()
    profile = resolve("cpu", sets=["loader.num_workers=0", "loader.prefetch_factor=null",
                                   "loader.persistent_workers=false"], env={}).profile
    plan = make_plan(profile, probe(), dataset_size=args.batches * profile.loader.batch_size)
    size, bs = profile.loader.image_size, profile.loader.batch_size
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(bs, 3, size, size, generator=g), torch.randint(0, 9, (bs,), generator=g))
               for _ in range(args.batches)]
    torch.manual_seed(0)
    base = tiny_cnn(num_classes=9)
    hand_model = copy.deepcopy(base).to(memory_format=torch.channels_last)
    # Same optimizer settings as the profile: AdamW, no decay on norm/bias (two param groups), foreach kernels.
    hand_opt = torch.optim.AdamW(param_groups(hand_model, profile.optim.weight_decay), lr=plan.scaled_lr, foreach=True)
    with tempfile.TemporaryDirectory() as tmp:
        telemetry = Telemetry("cpu").start()
        runlog = RunLog(Path(tmp))
        with Dashboard(plan, total_batches=args.batches * args.rounds, epochs=args.rounds, mode="plain",
                       stream=NullStream(), telemetry=telemetry) as dash:
            trainer = Trainer(plan, profile.optim, copy.deepcopy(base), steps_per_epoch=args.batches,
                              collaborators=Collaborators(telemetry=telemetry, dashboard=dash, runlog=runlog))
            # One compute thread on both sides: with other jobs on this 2-core machine, two spinning OpenMP
            # threads make each reading swing by several times, which would drown a 3% effect.
            threads = args.threads
            torch.set_num_threads(threads)

            def ours() -> tuple[float, float]:
                return _timed(lambda: trainer.train_epoch(batches, epoch=0)["train_images"])

            def theirs() -> tuple[float, float]:
                return _timed(lambda: hand_loop(hand_model, hand_opt, batches))

            ours(), theirs()  # warm-up: allocator, oneDNN kernels
            wall, cpu, mine, hand = [], [], [], []
            for r in range(args.rounds):
                if r % 2:
                    b, a = theirs(), ours()
                else:
                    a, b = ours(), theirs()
                mine.append(a[0])
                hand.append(b[0])
                wall.append(a[0] / b[0])
                cpu.append(a[1] / b[1])
                print(f"# round {r + 1}: wall ratio {wall[-1]:.3f}, CPU-time ratio {cpu[-1]:.3f}", file=sys.stderr)
        telemetry.stop()
        runlog.close()
    print("| loop | images/s (median) |")
    print("| --- | ---: |")
    print(f"| fasttrain Trainer + telemetry + plain dashboard + run log | {statistics.median(mine):.0f} |")
    print(f"| minimal hand-written loop | {statistics.median(hand):.0f} |")
    print(f"\nthroughput ratio fasttrain / hand loop over {args.rounds} rounds (target >= 0.97):")
    print(f"  by process CPU time: median {statistics.median(cpu):.3f} (min {min(cpu):.3f}, max {max(cpu):.3f})")
    print(f"  by wall clock:       median {statistics.median(wall):.3f} (min {min(wall):.3f}, max {max(wall):.3f})")
    print("  (CPU time counts every thread of this process, telemetry's and TensorBoard's included, and is not "
          "inflated by other jobs on the machine; the wall clock is, so its spread is wider)")
    print(f"settings: tiny_cnn, batch {bs}, {size} px, channels_last, bf16 autocast, AdamW, {threads} threads, "
          f"{args.batches} in-memory batches per side per round")
    return 0


if __name__ == "__main__":
    sys.exit(main())
