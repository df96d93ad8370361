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


HELP_COMMANDS = [[], ["train"], ["estimate"], ["doctor"], ["profiles", "list"], ["profiles", "show"],
                 ["profiles", "validate"], ["bench", "speedups"], ["bench", "batch"], ["bench", "loader"],
                 ["bench", "compare"]]


@pytest.mark.parametrize("command", HELP_COMMANDS, ids=lambda c: " ".join(c) or "root")
def test_help_shows_boolean_flags_as_flags(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A flag takes no value: `--dry-run <bool>` in the help invited `--dry-run true`, which is refused."""
    from fasttrain.cli import main

    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "--help" in out
    assert "<bool>" not in out


def test_root_help_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    import typer

    from fasttrain.cli import app, main

    assert main(["--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    group = typer.main.get_command(app)
    description = out.split("Options")[0]  # the summary above the option and command panels
    for name in group.commands:  # type: ignore[attr-defined]
        assert name in description, f"`fasttrain --help` summary leaves out {name}"


def test_readme_says_what_make_demo_costs_first_and_later() -> None:
    """A fresh machine took 3 min 20 s where the README promised 1.5-2.5 min: the install was not counted."""
    from pathlib import Path

    head = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().splitlines()[:12])
    assert "1.5-2.5 min" not in head
    assert "first run" in head and "install" in head.lower() and "later run" in head
