"""The competition path, measured: from scratch against fine-tuned from weights pretrained elsewhere, time to the
from-scratch run's final accuracy, and the submission's score against the validation accuracy.

On a Kaggle-shaped copy of real data (benchmarks/competition_data.py: Fashion-MNIST, train.csv of ids and class
names, train_images/, test_images/, sample_submission.csv) and weights a plain torch loop pretrained on other images
(a timm resnet18's state_dict, its head for another class count), this runs, in one interleaved run (the order
rotates each round), exactly what the issue's user runs:

  scratch    fasttrain train --data DIR/train.csv --model resnet18 --image-size 32 --epochs 4
  weights    the same with --weights pre.pth (fasttrain's fine-tuning recipe), and each --recipe NAME='--set ...'

each its own process with an empty fasttrain cache (a first run), round r with --seed r. The seconds count from the
moment this script launched the process (start-up, the data checks and the first epoch's costs count). Printed per
contender: each epoch's median validation accuracy and elapsed seconds, the time it first reached the scratch
run's final accuracy of the same round, and the speed-up (scratch's total time / the contender's time to that
accuracy; medians of the per-round ratios). Then the last round's runs predict the test images
(`fasttrain predict RUN --data DIR/test_images --out submission.csv --sample-submission ...`) and the submission is
scored against the answer key beside the run's final validation accuracy.

  .venv/bin/python benchmarks/finetune.py [--rounds 3] [--epochs 4] [--source fashion-coarse]
      [--recipe NAME='--set optim.base_lr=0.001'] [--work DIR]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from competition_data import SOURCES, competition_folder, pretrained_weights  # noqa: E402 - found through sys.path above (benchmarks/ is no package)


def run(data: Path, epochs: int, extra: list[str], work: Path, seed: int) -> list[dict[str, float]]:
    name = f"r{len(list(work.glob('runs/*')))}"
    env = {**os.environ, "FASTTRAIN_CACHE": str(work / f"cache-{name}")}  # a first run: nothing cached
    cmd = [sys.executable, "-m", "fasttrain", "train", "--data", str(data / "train.csv"), "--model", "resnet18",
           "--image-size", "32", "--epochs", str(epochs), "--runs-dir", str(work / "runs"), "--run-name", name,
           "--seed", str(seed), "--quiet", *extra]
    launched = time.time()
    done = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=3600,
                          check=False)
    if done.returncode:
        raise SystemExit(f"{shlex.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
    rows = [json.loads(line) for line in (work / "runs" / name / "metrics.jsonl").read_text().splitlines()]
    return [{"epoch": r["epoch"], "val_acc1": r["val_acc1"], "elapsed_s": r["time"] - launched, "run": name}
            for r in rows if r.get("kind") == "epoch"]


def reached(rows: list[dict[str, float]], target: float) -> float:
    """Seconds until the first epoch at or above `target`; inf when none."""
    return next((r["elapsed_s"] for r in rows if r["val_acc1"] >= target - 1e-9), float("inf"))


def score(run_dir: Path, data: Path, work: Path) -> tuple[float, float]:
    """(the submission's accuracy against solution.csv, the run's final validation accuracy)."""
    out = work / f"{run_dir.name}-submission.csv"
    subprocess.run([sys.executable, "-m", "fasttrain", "predict", str(run_dir), "--data", str(data / "test_images"),
                    "--out", str(out), "--sample-submission", str(data / "sample_submission.csv")],
                   check=True, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    with open(data / "solution.csv") as f:
        truth = {row["id"]: row["label"] for row in csv.DictReader(f)}
    with open(out) as f:
        rows = list(csv.DictReader(f))
    right = sum(truth.get(row["id"]) == row["label"] for row in rows)
    summary = json.loads((run_dir / "summary.json").read_text())
    return right / len(truth), float(summary["final_val_acc1"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--source", default="fashion-coarse", choices=SOURCES)
    parser.add_argument("--recipe", action="append", default=[], metavar="NAME='--set ...'")
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="fasttrain-finetune-"))
    work.mkdir(parents=True, exist_ok=True)
    data = competition_folder(work)
    weights = pretrained_weights(work, args.source)
    contenders = {"scratch": [], "weights": ["--weights", str(weights)]}
    for item in args.recipe:
        name, _, flags = item.partition("=")
        contenders[name] = ["--weights", str(weights), *shlex.split(flags)]
    results: dict[str, list[list[dict[str, float]]]] = {name: [] for name in contenders}
    for r in range(args.rounds):
        names = list(contenders)
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            results[name].append(run(data, args.epochs, contenders[name], work / "rounds", r))
            last = results[name][-1][-1]
            print(f"round {r + 1}/{args.rounds} {name}: final {last['val_acc1']:.4f} at {last['elapsed_s']:.1f} s",
                  file=sys.stderr)
    report(results, args.epochs)
    print("\nsubmission (last round): accuracy on the hidden answers vs the run's final validation accuracy")
    for name in contenders:
        sub, val = score(work / "rounds" / "runs" / results[name][-1][-1]["run"], data, work)
        print(f"  {name:<12} submission {sub:.4f}  validation {val:.4f}  difference {100 * (sub - val):+.1f} points")
    print(f"\nwork folder: {work}; data {data}; weights {weights}")
    return 0


def report(results: dict[str, list[list[dict[str, float]]]], epochs: int) -> None:
    scratch = results["scratch"]
    print(f"{'contender':<12} " + " ".join(f"{'epoch ' + str(e):>16}" for e in range(1, epochs + 1))
          + f" {'to scratch final':>17} {'speed-up':>9}")
    for name, rounds in results.items():
        cells = []
        for e in range(epochs):
            accs = [rows[e]["val_acc1"] for rows in rounds if len(rows) > e]
            times = [rows[e]["elapsed_s"] for rows in rounds if len(rows) > e]
            cells.append(f"{statistics.median(accs):.3f} {statistics.median(times):5.1f}s" if accs else "-")
        to_target = [reached(rows, scratch[i][-1]["val_acc1"]) for i, rows in enumerate(rounds)]
        ratios = [scratch[i][-1]["elapsed_s"] / t for i, t in enumerate(to_target)]
        print(f"{name:<12} " + " ".join(f"{c:>16}" for c in cells)
              + f" {statistics.median(to_target):16.1f}s {statistics.median(ratios):8.2f}x"
              + "  (" + ", ".join(f"{x:.2f}" if x else "never" for x in ratios) + ")")  # never: 0x, a loss


if __name__ == "__main__":
    raise SystemExit(main())
