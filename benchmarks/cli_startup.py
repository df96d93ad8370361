"""Wall time of the commands that must answer at once: `fasttrain --help` and `fasttrain profiles list`.

Target (issue 2): each under 0.5 s wall, median of 5, on the 2-core development machine.
Runs each command as a fresh process (that is what a user waits for), interleaved, after one warm-up.
Usage: .venv/bin/python benchmarks/cli_startup.py [--runs 5]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

FASTTRAIN = str(Path(sys.executable).with_name("fasttrain"))
COMMANDS = {
    "fasttrain --help": [FASTTRAIN, "--help"],
    "fasttrain profiles list": [FASTTRAIN, "profiles", "list"],
    "fasttrain profiles show aws-a10g": [FASTTRAIN, "profiles", "show", "aws-a10g"],
    "python -c 'import torch' (for scale)": [sys.executable, "-c", "import torch"],
}
TARGET_S = 0.5


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for cmd in COMMANDS.values():  # warm-up: page cache, .pyc files
        wall(cmd)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):  # interleaved, so drift hits every command alike
        for name, cmd in COMMANDS.items():
            times[name].append(wall(cmd))
    print(f"{'command':40} {'median s':>9} {'min s':>7} {'max s':>7}  target")
    failed = False
    for name, ts in times.items():
        med = statistics.median(ts)
        gated = name.startswith("fasttrain --help") or name.startswith("fasttrain profiles list")
        verdict = ("ok" if med < TARGET_S else "MISSED") if gated else "-"
        failed |= verdict == "MISSED"
        print(f"{name:40} {med:9.3f} {min(ts):7.3f} {max(ts):7.3f}  {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
