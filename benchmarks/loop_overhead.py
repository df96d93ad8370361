"""What fasttrain's loop costs over a minimal hand-written PyTorch loop: target ratio >= 0.97.

One process, same model architecture and initial weights, same in-memory batches, same settings (the cpu
profile's: channels_last, bf16 autocast, AdamW). fasttrain's side is the real Trainer.train_epoch with
Telemetry running, the Dashboard in plain mode writing to a null stream and a RunLog (metrics.jsonl and
TensorBoard) in a temporary directory. The hand loop is the textbook five lines. Rounds alternate which side
goes first; the reported figure is the median over rounds of (fasttrain images/s) / (hand loop images/s),
by this process's CPU time (robust to other jobs on a shared machine) and by the wall clock. A second,
low-noise reading times both loops around a near-free model: the difference is the loop's own cost per step.

  .venv/bin/python benchmarks/loop_overhead.py [--rounds 30] [--batches 10] [--threads 1]
"""
from __future__ import annotations

import argparse
import copy
import importlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from fasttrain.hardware.machine import probe
from fasttrain.models.tiny import tiny_cnn
from fasttrain.plan import make_plan
from fasttrain.profiles.presets import resolve
from fasttrain.telemetry.recorder import Telemetry
from fasttrain.train.loop.events import Collaborators
from fasttrain.train.loop.optim import param_groups
from fasttrain.train.loop.step import StepEngine
from fasttrain.train.loop.trainer import Trainer
from fasttrain.train.run.runlog import RunLog
from fasttrain.ui.dashboard import Dashboard


class NullStream(io.TextIOBase):
    def write(self, s: str) -> int:
        return len(s)

    def isatty(self) -> bool:
        return False


def _timed(fn) -> tuple[float, float]:
    """-> (images/s by the wall clock, images/s by this process's CPU time)."""
    wall, cpu = time.perf_counter(), time.process_time()
    images = fn()
    return images / (time.perf_counter() - wall), images / (time.process_time() - cpu)


def hand_loop(model, optimizer, batches, label_smoothing: float = 0.0) -> int:
    for images, targets in batches:
        images = images.to(memory_format=torch.channels_last)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(images)
        loss = F.cross_entropy(logits.float(), targets, label_smoothing=label_smoothing)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return sum(len(t) for _, t in batches)


def fixed_cost_per_step(plan, profile, rounds: int, steps: int = 400) -> tuple[float, float]:
    """CPU microseconds per step of each loop around a model that costs almost nothing (one Linear on 4 samples):
    what is left is the loop's own work (Python, telemetry, logging). Interleaved; medians. -> (fasttrain, hand)."""
    torch.manual_seed(0)
    tiny = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 3))
    batches = [(torch.randn(4, 3, 2, 2), torch.randint(0, 3, (4,))) for _ in range(steps)]
    with tempfile.TemporaryDirectory() as tmp:
        telemetry = Telemetry("cpu").start()
        runlog = RunLog(Path(tmp))
        with Dashboard(plan, total_batches=steps * rounds, epochs=rounds, mode="plain", stream=NullStream(),
                       telemetry=telemetry) as dash:
            engine = StepEngine.build(plan, profile.optim, copy.deepcopy(tiny), batches_per_epoch=steps)
            trainer = Trainer(engine, collaborators=Collaborators(telemetry=telemetry, dashboard=dash, runlog=runlog))
            hand_model = copy.deepcopy(tiny).to(memory_format=torch.channels_last)
            hand_opt = torch.optim.AdamW(param_groups(hand_model, profile.optim.weight_decay), lr=plan.scaled_lr,
                                         foreach=True)
            ours, hand = [], []
            for _ in range(rounds + 1):  # the first round warms up
                t = time.process_time()
                trainer.train_epoch(batches, epoch=0)
                ours.append((time.process_time() - t) / steps * 1e6)
                t = time.process_time()
                hand_loop(hand_model, hand_opt, batches, profile.optim.label_smoothing)
                hand.append((time.process_time() - t) / steps * 1e6)
        telemetry.stop()
        runlog.close()
    return statistics.median(ours[1:]), statistics.median(hand[1:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--batches", type=int, default=10, help="batches per side per round")
    ap.add_argument("--threads", type=int, default=1, help="torch compute threads, both sides")
    args = ap.parse_args()
    # The loop's own cost: the weight EMA is the recipe's (docs/benchmarks.md "Recipe" prices it), not the loop's,
    # so it is off here; label smoothing is on both sides.
    profile = resolve("cpu", sets=["loader.num_workers=0", "loader.prefetch_factor=null",
                                   "loader.persistent_workers=false", "optim.ema_decay=null"], env={}).profile
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
    # One-time start-up cost, reported on its own: the run log imports TensorBoard on a background thread at
    # the first logged step, and an import holds the GIL for most of its time (the training thread stalls).
    # Imported here first, so the rounds below measure the per-step cost of a run in its steady state.
    started = time.perf_counter()
    importlib.import_module("torch.utils.tensorboard")
    tb_import_s = time.perf_counter() - started
    with tempfile.TemporaryDirectory() as tmp:
        telemetry = Telemetry("cpu").start()
        runlog = RunLog(Path(tmp))
        with Dashboard(plan, total_batches=args.batches * args.rounds, epochs=args.rounds, mode="plain",
                       stream=NullStream(), telemetry=telemetry) as dash:
            engine = StepEngine.build(plan, profile.optim, copy.deepcopy(base), batches_per_epoch=args.batches)
            trainer = Trainer(engine, collaborators=Collaborators(telemetry=telemetry, dashboard=dash, runlog=runlog))
            # One compute thread on both sides: with other jobs on this 2-core machine, two spinning OpenMP
            # threads make each reading swing by several times, which would drown a 3% effect.
            threads = args.threads
            torch.set_num_threads(threads)

            def ours() -> tuple[float, float]:
                return _timed(lambda: trainer.train_epoch(batches, epoch=0)["train_images"])

            def theirs() -> tuple[float, float]:
                return _timed(lambda: hand_loop(hand_model, hand_opt, batches, profile.optim.label_smoothing))

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
    print(f"one-time start-up cost not in the ratio: TensorBoard import {tb_import_s:.1f} s (paid once per run)")
    ours_us, hand_us = fixed_cost_per_step(plan, profile, rounds=5)
    step_us = 1e6 * bs / statistics.median(hand)
    print("\nfixed cost per step (a near-free model, so only the loop's own work is left; CPU time, medians):")
    print(f"  fasttrain {ours_us:.0f} us, hand loop {hand_us:.0f} us: {ours_us - hand_us:.0f} us more per step = "
          f"{(ours_us - hand_us) / step_us:.2%} of a {step_us / 1000:.0f} ms tiny_cnn step -> ratio "
          f"{step_us / (step_us + ours_us - hand_us):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
