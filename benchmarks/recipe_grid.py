"""Recipes compared by the epoch that reaches a target accuracy, over seeds, on real data nobody here made.

Each recipe is `fasttrain train` with the default preset plus its `--set` overrides, run once per seed on
scikit-learn's digits, (--data photos, photos-large) scikit-image's photographs, (--data fashion) Fashion-MNIST or
(--data mnist) 4,000 of MNIST's digits (time_to_accuracy.py's folders), resnet18 from scratch, 8 epochs. Printed: per
recipe and seed, val acc@1 after each epoch, the epoch and the seconds from launch at which the target was first
reached, and the final accuracy; then per recipe the median epoch to the target. The epoch is the figure that does not
depend on how busy the machine is; the seconds do.
This chose the `cpu` preset's recipe (docs/benchmarks.md, "Recipe").

  .venv/bin/python benchmarks/recipe_grid.py [--data digits|photos|photos-large|fashion|mnist] [--seeds 1 2 3]
      [--epochs 8] [--target 0.97]
      [--recipe NAME='--set optim.base_lr=0.006' ...]   (default: the grid in docs/benchmarks.md)
"""
from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from time_to_accuracy import REAL_DATA, TARGETS, data_folder, run_fasttrain  # the same folders

GRID = {
    "default": "",
    "previous (warm-up 1, no LS, no EMA)":
        "--set optim.warmup_epochs=1 --set optim.label_smoothing=0 --set optim.ema_decay=null",
    "batch 32": "--set loader.batch_size=32",
    "warm-up 0": "--set optim.warmup_epochs=0",
    "LR x2": "--set optim.base_lr=0.006",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--target", type=float, default=None, help="default: time_to_accuracy.py's target for --data")
    ap.add_argument("--data", choices=REAL_DATA, default="digits")
    ap.add_argument("--recipe", action="append", default=[], metavar="NAME='ARGS'")
    args = ap.parse_args()
    args.target = TARGETS[args.data] if args.target is None else args.target
    grid = dict(r.split("=", 1) for r in args.recipe) if args.recipe else GRID
    reached: dict[str, list[int]] = {name: [] for name in grid}
    seconds: dict[str, list[float]] = {name: [] for name in grid}
    finals: dict[str, list[float]] = {name: [] for name in grid}
    with tempfile.TemporaryDirectory(prefix="recipes-") as tmp:
        work = Path(tmp)
        data = data_folder(args.data, work)
        print(f"| recipe | seed | val acc@1 by epoch | {args.target:.0%} at | final |")
        print("| --- | ---: | --- | --- | ---: |")
        for seed in args.seeds:  # seeds outermost: every recipe runs in each stretch of the machine's load
            for name, extra in grid.items():
                epochs = run_fasttrain(data, args.epochs, shlex.split(extra), work, seed)
                hit = next((r for r in epochs if r["val_acc1"] >= args.target), None)
                reached[name].append(hit["epoch"] if hit else args.epochs + 1)
                seconds[name].append(hit["elapsed_s"] if hit else float("inf"))
                finals[name].append(epochs[-1]["val_acc1"])
                at = f"epoch {hit['epoch']}, {hit['elapsed_s']:.1f} s" if hit else "not reached"
                accs = " ".join(f"{r['val_acc1']:.3f}" for r in epochs)
                print(f"| {name} | {seed} | {accs} | {at} | "
                      f"{epochs[-1]['val_acc1']:.4f} |", flush=True)
    print()
    for name, hits in reached.items():
        print(f"{name}: median epoch to {args.target:.0%}: {statistics.median(hits):g} (per seed {hits}); "
              f"median {statistics.median(seconds[name]):.1f} s from launch; "
              f"median final {statistics.median(finals[name]):.4f}")


if __name__ == "__main__":
    main()
