"""Which speed settings pay off for tiny_cnn on the built-in shapes set on THIS CPU: measured, not assumed.

Every configuration differs from the baseline (fp32, no channels_last, no compile, 1 worker, batch 64,
torch threads = cores minus workers) in one setting (one row combines channels_last and bf16). Each gets its
own real Trainer (the same step code as
`fasttrain train`) and a real DataLoader over the shapes PNG files (decode + augmentation in workers);
a round times K batches of every configuration in a shuffled order, so load from other processes hits
all of them alike. Reported: median images/s over the rounds and the median of per-round ratios to the
baseline (>1 = faster). Compile time is excluded (it is paid once, at warm-up).

  .venv/bin/python benchmarks/cpu_settings.py [--rounds 5] [--batches 12]
"""
from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import sys
import time

import torch

from fasttrain.datasets.build import build_datasets
from fasttrain.datasets.loaders import build_loaders
from fasttrain.datasets.sampler import EpochSampler
from fasttrain.hardware.machine import probe
from fasttrain.models.registry import create_model
from fasttrain.models.setup import cpu_threads
from fasttrain.plan import make_plan
from fasttrain.profiles.presets import resolve
from fasttrain.train.loop.batches import window_length
from fasttrain.train.loop.step import StepEngine
from fasttrain.train.loop.trainer import Trainer

BASE = ["speed.precision=fp32", "speed.channels_last=false", "speed.compile=false", "loader.num_workers=1",
        "loader.prefetch_factor=2", "loader.persistent_workers=true", "loader.batch_size=64"]
CORES = len(os.sched_getaffinity(0))
# name -> (--set overrides, torch threads; None = fasttrain's rule: cores minus loader workers, at least 1)
CONFIGS: dict[str, tuple[list[str], int | None]] = {
    "baseline": ([], None),
    "torch default threads (all cores)": ([], CORES),
    "channels_last": (["speed.channels_last=true"], None),
    "bf16 autocast": (["speed.precision=bf16-mixed"], None),
    "channels_last + bf16": (["speed.channels_last=true", "speed.precision=bf16-mixed"], None),
    "compile": (["speed.compile=true"], None),
    "workers 0": (["loader.num_workers=0", "loader.prefetch_factor=null", "loader.persistent_workers=false"], None),
    "workers 2": (["loader.num_workers=2"], None),
    "batch 32": (["loader.batch_size=32"], None),
    "batch 128": (["loader.batch_size=128"], None),
}


class Case:
    def __init__(self, name: str, sets: list[str], threads: int, report, bundle):
        profile = resolve("cpu", sets=BASE + sets, env={}).profile
        self.plan = make_plan(profile, report, dataset_size=bundle.train_size)
        self.name, self.threads = name, threads or cpu_threads(self.plan.workers)
        torch.manual_seed(0)
        model = create_model("tiny_cnn", bundle.num_classes)
        self.trainer = Trainer(StepEngine.build(self.plan, profile.optim, model, batches_per_epoch=10_000))
        sampler = EpochSampler(bundle.train_size, seed=0, drop_last=True)
        self.loader, _ = build_loaders(bundle, self.plan, seed=0, epoch_sampler=sampler)
        self.batches = self._cycle()
        self.i = 0

    def _cycle(self):
        for epoch in itertools.count():
            self.loader.sampler.set_epoch(epoch)
            yield from self.loader

    def run(self, k: int) -> float:
        """Time k batches (data wait included) -> images/s."""
        torch.set_num_threads(self.threads)
        engine = self.trainer.engine
        images_seen = 0
        start = time.perf_counter()
        for _ in range(k):
            images, targets = engine.to_device(*next(self.batches))
            window, _closes = window_length(self.i, 10_000, 1)
            engine.forward_backward(images, targets, window)
            engine.optimizer_step()
            self.i += 1
            images_seen += int(targets.shape[0])
        return images_seen / (time.perf_counter() - start)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=12, help="batches timed per configuration per round")
    ap.add_argument("--only", nargs="*", help="configuration names to run (default: all)")
    args = ap.parse_args()
    report = probe()
    base = resolve("cpu", sets=BASE, env={}).profile
    bundle = build_datasets("shapes", image_size=base.loader.image_size, augment=base.augment, seed=0)
    names = args.only or list(CONFIGS)
    print(f"# {CORES} cores, torch {torch.__version__}, load average {os.getloadavg()[0]:.1f}; warming up "
          f"(compile takes a while)", file=sys.stderr)
    cases = [Case(n, *CONFIGS[n], report, bundle) for n in names]
    for c in cases:  # warm-up: worker start, compile, allocator
        c.run(3)
    rates: dict[str, list[float]] = {c.name: [] for c in cases}
    rng = random.Random(0)
    for r in range(args.rounds):
        order = cases[:]
        rng.shuffle(order)
        for c in order:
            rates[c.name].append(c.run(args.batches))
        print(f"# round {r + 1}/{args.rounds} done, load {os.getloadavg()[0]:.1f}", file=sys.stderr)
    torch.set_num_threads(CORES)
    ref = rates.get("baseline")
    print("| setting (one change from baseline) | images/s (median) | ratio to baseline (median) | rounds |")
    print("| --- | ---: | ---: | ---: |")
    for name, vals in rates.items():
        ratio = statistics.median(v / b for v, b in zip(vals, ref, strict=True)) if ref else float("nan")
        print(f"| {name} | {statistics.median(vals):.0f} | {ratio:.2f} | {len(vals)} |")
    print("\nbaseline: fp32, no channels_last, no compile, 1 worker (prefetch 2), batch 64, "
          "torch threads = cores - workers; "
          f"{args.batches} batches per configuration per round, interleaved in shuffled order.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
