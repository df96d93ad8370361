"""The API's keywords are the commands' flags: each keyword becomes the flag a shell would pass, and the command runs
as on the command line (its parsing, defaults, checks and code) with an `ApiCall` that makes it return its result.

A keyword is a long flag's name with dashes as underscores (`batch_size` for --batch-size, `set` for --set) or the
command's own parameter name (`sets`, `as_json`): adding a flag to a command adds its keyword, with nothing to
change here. Values: None leaves the flag out; True gives a switch (--no-tune), False leaves it out; a list or
tuple gives a repeatable flag once per item, a dict once per KEY=VALUE; anything else is written as text, as a
shell would pass it (str(), so 0.1 reads 0.1). Whatever is wrong is the command's own one-line reason (UserError).
"""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

from fasttrain.commands.options import ApiCall, click_exceptions
from fasttrain.core.errors import Problem, UserError
from fasttrain.core.suggest import did_you_mean

if TYPE_CHECKING:
    from typer.core import TyperCommand
    from typer.models import Context

    from fasttrain.train.events import DisplayFactory

# Flags that mean nothing from Python, and what to do instead; each command refuses these keywords.
NOT_FROM_PYTHON = {
    "as_json": "the API returns the result itself; its .to_dict() is the --json payload",
    "dry_run": "call fasttrain.plan(...) with the same arguments",
    "nproc_per_node": "a data-parallel job starts its processes from a shell: `fasttrain train --nproc-per-node N "
                      "...` (in a notebook cell: !fasttrain train ...)",
}
LAUNCH_FLAGS = ("nnodes", "node_rank", "rdzv_endpoint", "rdzv_timeout")


def command(name: str) -> TyperCommand:
    """The click command of `fasttrain NAME`, built from the same registration the command line uses."""
    from fasttrain.commands import doctor, estimate, train
    register: Callable[[typer.Typer], None] = {"train": train.register, "doctor": doctor.register,
                                               "estimate": estimate.register}[name]
    app = typer.Typer(add_completion=False)
    register(app)
    return typer.main.get_command(app)  # type: ignore[return-value]


def keywords(cmd: TyperCommand) -> dict[str, object]:
    """keyword -> the command's parameter (an option or an argument)."""
    table: dict[str, object] = {}
    for param in getattr(cmd, "params", []):
        table[param.name] = param
        for opt in param.opts:
            if opt.startswith("--"):
                table.setdefault(opt[2:].replace("-", "_"), param)
    return table


def argv_for(cmd: TyperCommand, given: Mapping[str, object], who: str, allow: tuple[str, ...] = ()) -> list[str]:
    """The command line `given` stands for; UserError for a keyword the command has not or Python cannot use
    (`allow`: those the API itself sets, fasttrain.plan()'s dry_run)."""
    table = keywords(cmd)
    options: list[str] = []
    arguments: list[str] = []
    for key, value in given.items():
        param = table.get(key)
        if param is None:
            names = sorted(k for k in table if k not in NOT_FROM_PYTHON)
            raise UserError([Problem(f"{who}()", f"no keyword {key!r}", _keyword_fix(key, names, who))])
        name = getattr(param, "name", key)
        if (name in NOT_FROM_PYTHON or name in LAUNCH_FLAGS) and name not in allow:
            if value is None or value is False:
                continue
            raise UserError([Problem(f"{who}()", f"{key}= is not taken from Python",
                                     NOT_FROM_PYTHON.get(name, NOT_FROM_PYTHON["nproc_per_node"]))])
        if getattr(param, "param_type_name", "") == "argument":
            arguments += [] if value is None else [_text(value, key)]
        else:
            options += _option_args(param, key, value)
    return options + (["--", *arguments] if arguments else [])


def _keyword_fix(key: str, names: list[str], who: str) -> str:
    """How to say what an unknown keyword meant: a profile setting it names (lr -> set={"optim.base_lr": ...}),
    else the keywords it is close to, else where the keywords are listed."""
    from fasttrain.profiles.schema import Profile
    settings = [f"{section}.{leaf}" for section, info in Profile.model_fields.items()
                for leaf in getattr(info.annotation, "model_fields", {})]
    for match in (lambda leaf: leaf == key, lambda leaf: leaf.endswith("_" + key) or leaf.startswith(key + "_")):
        found = [s for s in settings if match(s.rpartition(".")[2])]
        if found:
            return f"it is a profile setting: set={{{found[0]!r}: ...}} (`fasttrain profiles show` lists them)"
    return did_you_mean(key, names) or f"see help({who}) for its keywords"


def _option_args(param: object, key: str, value: object) -> list[str]:
    flag = max((o for o in getattr(param, "opts", []) if o.startswith("--")), key=len, default=f"--{key}")
    if value is None:
        return []
    if getattr(param, "is_flag", False):
        if isinstance(value, bool):
            return [flag] if value else []
        raise UserError([Problem(flag, f"{key}= is a switch: True or False", f"e.g. {key}=True", value)])
    if getattr(param, "multiple", False):
        items = [f"{k}={v}" for k, v in value.items()] if isinstance(value, Mapping) else \
            list(value) if isinstance(value, (list, tuple)) else [value]
        return [f"{flag}={_text(item, key)}" for item in items]
    if isinstance(value, (list, tuple, set, dict)):
        raise UserError([Problem(flag, f"{key}= takes one value, not a {type(value).__name__}", "", value)])
    return [f"{flag}={_text(value, key)}"]


def _text(value: object, key: str) -> str:
    """A value as a shell would pass it."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    try:
        return value if isinstance(value, str) else str(value)
    except Exception as exc:
        raise UserError([Problem(f"{key}=", f"cannot be written as the flag's text ({type(exc).__name__})",
                                 "give a number or a string")]) from None


def run(name: str, given: Mapping[str, object], who: str, display: DisplayFactory | None = None,
        allow: tuple[str, ...] = ()) -> object:
    """Run `fasttrain NAME` with the flags `given` stands for; -> what the command returns for the API."""
    from fasttrain.core.errors import JobFailed
    from fasttrain.ui.notebook import tqdm_without_widgets
    tqdm_without_widgets()  # before the command imports timm: no TqdmWarning under a notebook's first call
    cmd = command(name)
    _, exits, _ = click_exceptions()
    try:
        with _offline(), parsed(cmd, name, given, who, display, allow) as ctx:
            return cmd.invoke(ctx)
    except exits as exc:
        code = int(getattr(exc, "exit_code", 0) or 0)
        if code:
            raise JobFailed(f"fasttrain {name} ended with exit code {code}") from None
        return None


@contextmanager
def parsed(cmd: TyperCommand, name: str, given: Mapping[str, object], who: str, display: DisplayFactory | None = None,
           allow: tuple[str, ...] = ()) -> Iterator[Context]:
    """The command's context with `given` parsed as its flags (types, defaults, the options' own checks), as on
    the command line; a value it refuses is a UserError with the command line's words."""
    usage_errors, _, _ = click_exceptions()
    argv = argv_for(cmd, given, who, allow)
    try:
        ctx = cmd.make_context(f"fasttrain {name}", argv, obj=ApiCall(display))
    except usage_errors as exc:
        raise UserError([_usage_problem(exc, name)]) from None
    with ctx:
        yield ctx


# huggingface_hub's switches that stay_offline() turns on, by the environment variable each is read from
_HUB_SWITCHES = {"HF_HUB_OFFLINE": "HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY": "HF_HUB_DISABLE_TELEMETRY"}


@contextmanager
def _offline() -> Iterator[None]:
    """fasttrain never downloads (models/registry.py stay_offline, as the command line's root does for every
    command), for the length of the call; then the caller's own settings come back, so a notebook's later
    `timm.create_model(..., pretrained=True)` of its own may download as before."""
    from fasttrain.models.registry import OFFLINE_ENV, stay_offline
    saved = {key: os.environ.get(key) for key in OFFLINE_ENV}
    hub = sys.modules.get("huggingface_hub.constants")
    switches = {attr: getattr(hub, attr) for attr in _HUB_SWITCHES if hasattr(hub, attr)} if hub else {}
    stay_offline()
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        hub = sys.modules.get("huggingface_hub.constants")  # imported by the call, perhaps: read the env again
        for attr, env in _HUB_SWITCHES.items():
            if hub is not None and hasattr(hub, attr):
                setattr(hub, attr, switches.get(attr, (saved.get(env) or "").upper() in ("1", "ON", "YES", "TRUE")))


def _usage_problem(exc: Exception, name: str) -> Problem:
    """A click usage error (a value of the wrong type, a missing value) as the command line words it."""
    param = getattr(exc, "param", None)
    opts = getattr(param, "opts", None) or []
    where = opts[0] if opts else (getattr(param, "name", None) or f"fasttrain {name}")
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    return Problem(where, message, f"see `fasttrain {name} --help` (or help(fasttrain.{name}))")
