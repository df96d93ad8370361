"""Wall time of the commands that must answer at once: `fasttrain --help` and `fasttrain profiles list`.

Target: each under 0.5 s wall, median of 5, on the 2-core development machine.
Runs each command as a fresh process (that is what a user waits for), interleaved, after one warm-up.
Usage: .venv/bin/python benchmarks/cli_startup.py [--runs 5]
"""
from __future__ import annotations

import sys

from wall_timing import FASTTRAIN, SCALE, SCALE_CMD, main

COMMANDS = {
    "fasttrain --help": [FASTTRAIN, "--help"],
    "fasttrain profiles list": [FASTTRAIN, "profiles", "list"],
    "fasttrain profiles show aws-a10g": [FASTTRAIN, "profiles", "show", "aws-a10g"],
    SCALE: SCALE_CMD,
}
GATED = ("fasttrain --help", "fasttrain profiles list")
TARGET_S = 0.5


if __name__ == "__main__":
    sys.exit(main(COMMANDS, GATED, TARGET_S, __doc__))
