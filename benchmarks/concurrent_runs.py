"""Two `fasttrain train` runs started together: what share of one run's images/s alone each keeps (issue 42).

A fair share on a machine both runs fill is 1/2 each; threads that wait at barriers for a thread the scheduler put
aside lose far more (the issue measured 22% each on 2 cores). This runs, interleaved round by round:
  alone       one `fasttrain train --model MODEL --data shapes --time-budget B` on the quiet machine
  pair        two of the same command started together (the default: threads follow the free cores)
  pair-fixed  the same pair with --set speed.follow_free_cores=false (the threads the plan chose, all run long)
Each run's figure is summary.json's train_images_per_s (its training passes: start-up, tuning and validation are
not counted); a pair's share is each run's figure over the alone figure of the same round. Printed: the median
share of each run and of the slower one, and how often the threads changed. The CPU model heads the table.
Exit 1 when the default pair's slower run keeps less than --target of the alone rate.

  .venv/bin/python benchmarks/concurrent_runs.py [--rounds 2] [--budget 45s] [--model resnet18] [--target 0.35]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def _cpu_model() -> str:
    from fasttrain.hardware.machine import probe_cpu
    return probe_cpu()[0].model


def _command(model: str, budget: str, runs: Path, name: str, fixed: bool) -> list[str]:
    return [sys.executable, "-m", "fasttrain", "train", "--model", model, "--data", "shapes", "--time-budget", budget,
            "--runs-dir", str(runs), "--run-name", name, "--quiet",
            *(["--set", "speed.follow_free_cores=false"] if fixed else [])]


def _start(cmd: list[str], cache: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "FASTTRAIN_CACHE": str(cache)}
    env.pop("OMP_NUM_THREADS", None)
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _rate(proc: subprocess.Popen[str], run: Path) -> tuple[float, int]:
    _, err = proc.communicate(timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{run.name} failed ({proc.returncode}): {err[-1500:]}")
    summary = json.loads((run / "summary.json").read_text())
    return float(summary["train_images_per_s"]), len(summary.get("thread_changes", []))


def one(way: str, model: str, budget: str, work: Path, r: int) -> list[tuple[float, int]]:
    """Run `way` once: -> (images/s, thread changes) of each of its runs."""
    runs, cache = work / "runs", work / "cache"   # one cache for all: each run reads the shapes set's pixels
    count = 1 if way == "alone" else 2
    names = [f"{way}-{r}-{i}" for i in range(count)]
    procs = [_start(_command(model, budget, runs, n, way == "pair-fixed"), cache) for n in names]
    return [_rate(p, runs / n) for p, n in zip(procs, names, strict=True)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--budget", default="45s")
    ap.add_argument("--model", default="resnet18")
    ap.add_argument("--target", type=float, default=0.35)
    args = ap.parse_args()
    ways = ("alone", "pair", "pair-fixed")
    shares: dict[str, list[list[float]]] = {"pair": [], "pair-fixed": []}
    changes: dict[str, list[int]] = {"pair": [], "pair-fixed": []}
    with tempfile.TemporaryDirectory(prefix="concurrent-") as tmp:
        work = Path(tmp)
        one("alone", args.model, args.budget, work, -1)  # untimed: fills the cache (tuning, decoded pixels)
        for r in range(args.rounds):
            got = {way: one(way, args.model, args.budget, work, r) for way in ways}
            alone = got["alone"][0][0]
            for way in shares:
                shares[way].append([rate / alone for rate, _ in got[way]])
                changes[way].append(sum(n for _, n in got[way]))
            print(f"# round {r + 1}: alone {alone:.0f} img/s; " + "; ".join(
                f"{w} {' + '.join(f'{x:.0f}' for x, _ in got[w])} img/s" for w in shares), file=sys.stderr, flush=True)
    print(f"\nCPU: {_cpu_model()}, {len(os.sched_getaffinity(0))} cores; {args.model} on shapes, --time-budget "
          f"{args.budget}, {args.rounds} rounds")
    print("| way | each run's share of alone (median) | slower run's share (median) | thread changes a round |")
    print("| --- | ---: | ---: | ---: |")
    for way, per_round in shares.items():
        each = statistics.median(x for pair in per_round for x in pair)
        slower = statistics.median(min(pair) for pair in per_round)
        print(f"| {way} | {each:.0%} | {slower:.0%} | {statistics.median(changes[way]):g} |")
    slower = statistics.median(min(pair) for pair in shares["pair"])
    print(f"pair: the slower run keeps {slower:.0%} of one run alone (target {args.target:.0%})")
    return 0 if slower >= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
