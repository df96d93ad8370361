"""Shared by the startup benchmarks: time whole commands as fresh processes, interleaved, and print medians.

Each command runs once as a warm-up (page cache, .pyc files), then `runs` rounds in turn so that load drift on
a shared machine hits every command alike. Rows named in `gated` are checked against `target_s`.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

FASTTRAIN = str(Path(sys.executable).with_name("fasttrain"))
SCALE = "python -c 'import torch' (for scale)"
SCALE_CMD = [sys.executable, "-c", "import torch"]


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def interleaved(commands: dict[str, list[str]], runs: int) -> dict[str, list[float]]:
    for cmd in commands.values():
        wall(cmd)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, cmd in commands.items():
            times[name].append(wall(cmd))
    return times


def report(times: dict[str, list[float]], gated: tuple[str, ...], target_s: float) -> int:
    """Print the table (with each median relative to `import torch` when measured); 1 when a gated row missed."""
    base = statistics.median(times[SCALE]) if SCALE in times else None
    rel = f" {'/ import torch':>15}" if base else ""
    print(f"{'command':40} {'median s':>9} {'min s':>7} {'max s':>7}{rel}  target {target_s:g} s")
    failed = False
    for name, ts in times.items():
        med = statistics.median(ts)
        verdict = ("ok" if med < target_s else "MISSED") if name in gated else "-"
        failed |= verdict == "MISSED"
        ratio = f" {med / base:15.2f}" if base else ""
        print(f"{name:40} {med:9.3f} {min(ts):7.3f} {max(ts):7.3f}{ratio}  {verdict}")
    return 1 if failed else 0


def main(commands: dict[str, list[str]], gated: tuple[str, ...], target_s: float, doc: str) -> int:
    """The command line every startup benchmark shares: `--runs N`, then the interleaved table."""
    import argparse
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    return report(interleaved(commands, args.runs), gated, target_s)
