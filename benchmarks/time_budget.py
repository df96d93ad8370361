"""`train --time-budget`: does the run end inside its budget, with its LR at the floor, and beat the same run with
a fixed epoch count stopped at the same moment?

Each round, alternating which goes first, on the built-in set (`fasttrain train` as a user runs it):
  budget   `fasttrain train --time-budget B`: its whole wall time (process start to exit) against B, the LR at the
           end as a share of the peak, its final val acc@1
  fixed    `fasttrain train` (the profile's epochs) stopped by SIGTERM when the budgeted run's wall time has passed:
           the val acc@1 of the last epoch it finished (a stopped run keeps its last validated model)
Targets: wall time within 90-102% of B, LR at the end at most 2% of its peak, final accuracy not below fixed's.

  .venv/bin/python benchmarks/time_budget.py [--budget 90] [--rounds 3] [--args '--data shapes']
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run(args: list[str], work: Path, name: str, stop_after_s: float | None = None) -> tuple[float, dict]:
    """-> (wall seconds from spawn to exit, the run's summary or its epoch rows)."""
    env = {**os.environ, "FASTTRAIN_CACHE": str(work / "cache")}
    cmd = [sys.executable, "-m", "fasttrain", "train", "--runs-dir", str(work / "runs"), "--run-name", name,
           "--quiet", *args]
    started = time.perf_counter()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if stop_after_s is not None:
        try:
            child.wait(timeout=stop_after_s)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGTERM)
    child.wait()
    wall = time.perf_counter() - started
    rows = [json.loads(line) for line in (work / "runs" / name / "metrics.jsonl").read_text().splitlines()]
    epochs = [r for r in rows if r.get("kind") == "epoch"]
    summary_path = work / "runs" / name / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    return wall, {"epochs": epochs, "summary": summary}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=float, default=90.0, help="seconds")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--args", default="", help="more `fasttrain train` arguments for both runs")
    args = ap.parse_args()
    extra = shlex.split(args.args)
    rows = []
    with tempfile.TemporaryDirectory(prefix="budget-") as tmp:
        work = Path(tmp)
        run(["--epochs", "1", *extra], work, "warm")  # the built-in set generated and decoded once, for both
        for r in range(args.rounds):
            order = ("budget", "fixed") if r % 2 == 0 else ("fixed", "budget")
            got: dict[str, tuple[float, dict]] = {}
            for way in order:
                if way == "budget":
                    got[way] = run(["--time-budget", f"{args.budget:g}s", *extra], work, f"b{r}")
                else:
                    got[way] = run(extra, work, f"f{r}", stop_after_s=args.budget)
            wall, budget = got["budget"]
            tb = budget["summary"].get("time_budget", {})
            fixed_epochs = got["fixed"][1]["epochs"]
            row = {"wall_share": wall / args.budget, "lr_end_share": tb.get("lr_end_share"),
                   "budget_acc": budget["epochs"][-1]["val_acc1"] if budget["epochs"] else None,
                   "fixed_acc": fixed_epochs[-1]["val_acc1"] if fixed_epochs else None,
                   "budget_epochs": len(budget["epochs"]), "fixed_epochs": len(fixed_epochs)}
            rows.append(row)
            print(f"# round {r + 1}: {json.dumps(row)}", file=sys.stderr, flush=True)
    share = statistics.median(r["wall_share"] for r in rows)
    lr = max(r["lr_end_share"] or 1.0 for r in rows)
    wins = sum(1 for r in rows if (r["budget_acc"] or 0) >= (r["fixed_acc"] or 0))
    print(f"\n--time-budget {args.budget:g}s {args.args}, {args.rounds} rounds")
    print("| round | wall / budget | LR at the end / peak | budget: final acc (epochs) "
          "| fixed, stopped then: acc (epochs) |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for i, r in enumerate(rows, 1):
        print(f"| {i} | {r['wall_share']:.1%} | {r['lr_end_share']:.2%} | {r['budget_acc']:.4f} ({r['budget_epochs']}) "
              f"| {r['fixed_acc'] if r['fixed_acc'] is None else format(r['fixed_acc'], '.4f')} "
              f"({r['fixed_epochs']}) |")
    ok = all(0.90 <= r["wall_share"] <= 1.02 for r in rows) and lr <= 0.02 and wins == len(rows)
    print(f"median wall / budget {share:.1%} (target 90-102%), largest LR at the end {lr:.2%} of peak (target <= 2%), "
          f"budget at least as accurate in {wins} of {len(rows)} rounds")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
