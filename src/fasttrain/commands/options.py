"""Typer options that several commands take, each defined once so its flags, metavar and help agree.

Every function returns a fresh `typer.Option(...)` to use as a parameter default. A command whose
option means something more specific (doctor checks the profile it is given; train's --json also
prints the plan) passes its own `help`; the flags, metavar and default stay the ones defined here.
Imports nothing heavy: cli.py imports every command module for `fasttrain --help`.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from types import EllipsisType
from typing import Any

import typer

from fasttrain.core.errors import Problem, UserError
from fasttrain.datasets.sampler import MAX_SEED  # noqa: F401 - re-exported for the commands


def click_exceptions() -> tuple[tuple[type[BaseException], ...], tuple[type[BaseException], ...],
                            tuple[type[BaseException], ...]]:
    """(ClickException, Exit, Abort) classes: Typer may vendor its own copy of click or use the real one."""
    modules = []
    for name in ("typer._click.exceptions", "click.exceptions"):  # typer's vendored click has no public path
        with contextlib.suppress(ImportError):
            modules.append(__import__(name, fromlist=["ClickException"]))

    def classes(attr: str) -> tuple[type[BaseException], ...]:
        return tuple(getattr(m, attr) for m in modules if hasattr(m, attr))

    usage = classes("ClickException")
    exits = (*classes("Exit"), typer.Exit)
    aborts = (*classes("Abort"), typer.Abort, KeyboardInterrupt)
    return usage, exits, aborts


PROFILE_HELP = "Preset name or profile YAML; default: the preset that fits this machine."
JSON_HELP = "Machine-readable output with stable keys."
MODEL_HELP = "timm / torchvision name, tiny_cnn, or module:callable."
BATCH_SIZE_HELP = ("Per-device batch: a number, or auto (the largest that runs a full training step here, "
                   "accumulation keeping the profile's effective batch). Default: the profile's.")


# Offered by shell completion for --model beside the built-in net (timm's full list would import torch on a TAB).
COMPLETED_MODELS = ("tiny_cnn", "resnet18", "resnet50", "efficientnet_b0", "mobilenetv3_large_100", "convnext_tiny",
                    "vit_small_patch16_224")


def complete_profile(incomplete: str) -> list[str]:
    """Preset names and the profile files here, for a TAB after --profile (no torch: YAML names only)."""
    from fasttrain.profiles.files import preset_names
    files = [p.name for p in Path(".").glob("*.y*ml") if p.suffix in (".yaml", ".yml")]
    return [n for n in [*preset_names(), *sorted(files)] if n.startswith(incomplete)]


def complete_model(incomplete: str) -> list[str]:
    return [n for n in COMPLETED_MODELS if n.startswith(incomplete)]


def complete_set(incomplete: str) -> list[str]:
    """Every profile key as `section.key=`, for a TAB after --set."""
    from fasttrain.profiles.schema import all_dotted_keys
    return [f"{k}=" for k in all_dotted_keys() if f"{k}=".startswith(incomplete)]


def profile_option(help: str = PROFILE_HELP) -> Any:
    """--profile/-p NAME|FILE (default None: the preset that fits this machine); an empty value is refused."""
    return typer.Option(None, "--profile", "-p", metavar="NAME|FILE", help=help, callback=_profile_callback,
                        autocompletion=complete_profile)


def _profile_callback(value: str | None) -> str | None:
    """Leaving --profile out picks the preset for this machine; giving it empty is a mistake, not that."""
    if value is not None and not value.strip():
        raise UserError([Problem("--profile", "is empty", "give a preset name (fasttrain profiles list) or a path "
                                 "to a .yaml file, or leave --profile out for the preset that fits this machine",
                                 value)])
    return value


def set_option() -> Any:
    """--set KEY=VALUE, repeatable (default None: no overrides)."""
    return typer.Option(None, "--set", metavar="KEY=VALUE", autocompletion=complete_set,
                        help="Override a profile value, e.g. --set loader.batch_size=128 (repeatable).")


def json_option(help: str = JSON_HELP) -> Any:
    """--json (default False)."""
    return typer.Option(False, "--json", help=help)


def model_option(default: str | EllipsisType | None, help: str = MODEL_HELP) -> Any:
    """--model/-m NAME|module:callable; `default` is ... where the command needs one. Empty or blank: exit 2."""
    return typer.Option(default, "--model", "-m", metavar="NAME|module:callable", help=help, callback=_model_callback,
                        autocompletion=complete_model)


def _model_callback(value: str | None) -> str | None:
    if value is not None:
        from fasttrain.estimate.checks import check_name
        check_name(value, "--model", "a timm or torchvision name, tiny_cnn, or module:callable")
    return value


def check_seed(value: int | None, flag: str = "--seed") -> int | None:
    """`value` when it is a seed numpy, random and torch all take (0 .. 2**32 - 1), else UserError."""
    from fasttrain.datasets.sampler import check_seed as check
    return None if value is None else check(value, flag)


def seed_option(default: int = 0, help: str = "Seeds data order, augmentation and initialisation "
                                              "(0 .. 4294967295).") -> Any:
    """--seed N, checked: 0 .. 2**32 - 1 (numpy's seed rejects negatives, torch overflows past 2**64)."""
    return typer.Option(default, "--seed", metavar="N", help=help, callback=_seed_callback)


def _seed_callback(value: Any) -> Any:  # typer passes the value as the callback's only parameter
    return check_seed(value)


def check_minutes(value: float | None, flag: str = "--save-every-minutes") -> float | None:
    """--save-every-minutes checked by train's own rule (train/setup/args.py check_minutes), which also checks a
    resumed run's saved value."""
    if value is None:  # off: no need to import the train layer while parsing
        return None
    from fasttrain.train.setup.args import check_minutes as check
    return check(value, flag)


def save_every_minutes_option() -> Any:
    """--save-every-minutes N (default None: off), checked: positive and finite."""
    return typer.Option(None, "--save-every-minutes", metavar="N", callback=_minutes_callback,
                        help="Also write last.pt mid-epoch every N minutes (for machines that vanish without "
                             "a signal).")


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


def _minutes_callback(value: Any) -> Any:  # typer passes the value as the callback's only parameter
    return check_minutes(value)
