"""The entry points: `fasttrain` and `python -m fasttrain`; the fast commands never import torch or timm."""
from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import run_subprocess

HEAVY = ("torch", "timm", "torchvision")


@pytest.mark.parametrize("args", [["--help"], ["profiles", "list"], ["profiles", "show", "aws-a10g"],
                                  ["profiles", "validate", "cpu"]])
def test_fast_commands_do_not_import_torch(args: list[str]) -> None:
    code = ("import sys\nfrom fasttrain.cli import main\n"
            f"rc = main({args!r})\n"
            f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
            "print('HEAVY', heavy)\nsys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "HEAVY []" in proc.stdout


def test_python_dash_m_and_help() -> None:
    proc = run_subprocess("--help")
    assert proc.returncode == 0
    for command in ("profiles",):
        assert command in proc.stdout


def test_unknown_command_is_usage_error() -> None:
    proc = run_subprocess("frobnicate")
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
