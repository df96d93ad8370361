"""Wall time of `fasttrain doctor` (target: under 3 s on the development machine, median of 5).

Each command runs as a fresh process, interleaved, after one warm-up, so load drift hits all alike.
Rows besides the gated one show where the time would go elsewhere:
- "probe with a torch child": what a machine with an NVIDIA device pays (the probe imports torch in a
  child process, overlapped with the other readings);
- "import torch, then probe": the naive order (torch imported in-process first), for comparison;
- "import torch": the cost the doctor avoids on a machine without a GPU.
Usage: .venv/bin/python benchmarks/doctor_speed.py [--runs 5]
"""
from __future__ import annotations

import sys

from wall_timing import FASTTRAIN, SCALE, SCALE_CMD, main

PY = sys.executable
PROBE = "from fasttrain.hardware.machine import probe; probe(import_torch=True)"
COMMANDS = {
    "fasttrain doctor": [FASTTRAIN, "doctor"],
    "fasttrain doctor --json": [FASTTRAIN, "doctor", "--json"],
    "probe with a torch child (GPU path)": [PY, "-c", PROBE],
    "import torch, then probe": [PY, "-c", "import torch; " + PROBE],
    SCALE: SCALE_CMD,
}
GATED = ("fasttrain doctor", "fasttrain doctor --json")
TARGET_S = 3.0


if __name__ == "__main__":
    sys.exit(main(COMMANDS, GATED, TARGET_S, __doc__))
