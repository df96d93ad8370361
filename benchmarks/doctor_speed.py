"""Wall time of `fasttrain doctor` (issue 3: under 3 s on the development machine, median of 5).

Each command runs as a fresh process, interleaved, after one warm-up, so load drift hits all alike.
Rows besides the gated one show where the time would go elsewhere:
- "probe with a torch child": what a machine with an NVIDIA device pays (the probe imports torch in a
  child process, overlapped with the other readings);
- "import torch, then probe": the naive order (torch imported in-process first), for comparison;
- "import torch": the cost the doctor avoids on a machine without a GPU.
Usage: .venv/bin/python benchmarks/doctor_speed.py [--runs 5]
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

FASTTRAIN = str(Path(sys.executable).with_name("fasttrain"))
PY = sys.executable
COMMANDS = {
    "fasttrain doctor": [FASTTRAIN, "doctor"],
    "fasttrain doctor --json": [FASTTRAIN, "doctor", "--json"],
    "probe with a torch child (GPU path)": [PY, "-c", "from fasttrain.hardware import probe; probe(import_torch=True)"],
    "import torch, then probe": [PY, "-c", "import torch; from fasttrain.hardware import probe; probe(import_torch=True)"],
    "python -c 'import torch' (for scale)": [PY, "-c", "import torch"],
}
GATED = ("fasttrain doctor", "fasttrain doctor --json")
TARGET_S = 3.0


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for cmd in COMMANDS.values():
        wall(cmd)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(args.runs):
        for name, cmd in COMMANDS.items():
            times[name].append(wall(cmd))
    base = statistics.median(times["python -c 'import torch' (for scale)"])
    print(f"{'command':40} {'median s':>9} {'min s':>7} {'max s':>7} {'/ import torch':>15}  target")
    failed = False
    for name, ts in times.items():
        med = statistics.median(ts)
        verdict = ("ok" if med < TARGET_S else "MISSED") if name in GATED else "-"
        failed |= verdict == "MISSED"
        print(f"{name:40} {med:9.3f} {min(ts):7.3f} {max(ts):7.3f} {med / base:15.2f}  {verdict}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
