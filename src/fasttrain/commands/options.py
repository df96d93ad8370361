"""Typer options that several commands take, each defined once so its flags, metavar and help agree.

Every function returns a fresh `typer.Option(...)` to use as a parameter default. A command whose
option means something more specific (doctor checks the profile it is given; train's --json also
prints the plan) passes its own `help`; the flags, metavar and default stay the ones defined here.
Imports nothing heavy: cli.py imports every command module for `fasttrain --help`.
"""
from __future__ import annotations

from typing import Any

import typer

PROFILE_HELP = "Preset name or profile YAML; default: the preset that fits this machine."
JSON_HELP = "Machine-readable output with stable keys."
MODEL_HELP = "timm / torchvision name, tiny_cnn, or module:callable."
BATCH_SIZE_HELP = ("Per-device batch: a number, or auto (the largest that runs a full training step here, "
                   "accumulation keeping the profile's effective batch). Default: the profile's.")


def profile_option(help: str = PROFILE_HELP) -> Any:
    """--profile/-p NAME|FILE (default None: the preset that fits this machine)."""
    return typer.Option(None, "--profile", "-p", metavar="NAME|FILE", help=help)


def set_option() -> Any:
    """--set KEY=VALUE, repeatable (default None: no overrides)."""
    return typer.Option(None, "--set", help="Override a profile value, e.g. --set loader.batch_size=128 "
                                            "(repeatable).")


def json_option(help: str = JSON_HELP) -> Any:
    """--json (default False)."""
    return typer.Option(False, "--json", help=help)


def model_option(default: Any, help: str = MODEL_HELP) -> Any:
    """--model/-m NAME|module:callable; `default` is ... where the command needs one."""
    return typer.Option(default, "--model", "-m", metavar="NAME|module:callable", help=help)


def image_size_option() -> Any:
    """--image-size PIXELS (default None: the profile's loader.image_size)."""
    return typer.Option(None, "--image-size", help="Training crop in pixels (default: the profile's "
                                                   "loader.image_size).")


def batch_size_option(help: str = BATCH_SIZE_HELP) -> Any:
    """--batch-size N|auto (default None: the profile's loader.batch_size)."""
    return typer.Option(None, "--batch-size", metavar="N|auto", help=help)


def nproc_per_node_option() -> Any:
    """--nproc-per-node N for commands that plan a data-parallel job without starting it."""
    return typer.Option(None, "--nproc-per-node", min=1, metavar="N",
                        help="Plan for N GPUs per machine of a data-parallel job (world.gpus_per_node).")


def nnodes_option() -> Any:
    """--nnodes M for commands that plan a data-parallel job without starting it."""
    return typer.Option(None, "--nnodes", min=1, metavar="M",
                        help="Plan for M machines of a data-parallel job (world.nodes).")
