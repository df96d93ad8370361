"""The API's keywords are the commands' parameters: a keyword is checked and converted by the command's own parameter
(its type, default, range and check: `--seed`'s, `--profile`'s), read from the command's definition, and the values
of every parameter go to the same request the command builds (train/setup/args.py train_args, DoctorRequest,
EstimateRequest). No command line is written and no command runs.

A keyword is a long flag's name with dashes as underscores (`batch_size` for --batch-size, `set` for --set) or the
command's own parameter name (`sets`, `as_json`): adding a flag to a command adds its keyword, with nothing to
change here. Values: None leaves the parameter at its default; a switch takes True or False; a list or tuple gives
a repeatable flag's values, a dict its KEY=VALUE items; anything else is read as the text a shell would pass (str(),
so 0.1 reads 0.1, and 3.5 is no --epochs). Whatever is wrong is the command line's own one-line reason (UserError).
"""
from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import typer

from fasttrain.commands.options import click_exceptions
from fasttrain.core.errors import Problem, UserError
from fasttrain.core.suggest import did_you_mean

if TYPE_CHECKING:
    from typer.core import TyperCommand

# Flags that mean nothing from Python, and what to do instead; each command refuses these keywords.
NOT_FROM_PYTHON = {
    "as_json": "the API returns the result itself; its .to_dict() is the --json payload",
    "dry_run": "call fasttrain.plan(...) with the same arguments",
    "nproc_per_node": "a data-parallel job starts its processes from a shell: `fasttrain train --nproc-per-node N "
                      "...` (in a notebook cell: !fasttrain train ...)",
}
LAUNCH_FLAGS = ("nnodes", "node_rank", "rdzv_endpoint", "rdzv_timeout")


def command(name: str) -> TyperCommand:
    """The click command of `fasttrain NAME`, built from the same registration the command line uses: the
    definition of its parameters, read here, never invoked."""
    from fasttrain.commands import doctor, estimate, train
    register: Callable[[typer.Typer], None] = {"train": train.register, "doctor": doctor.register,
                                               "estimate": estimate.register}[name]
    app = typer.Typer(add_completion=False)
    register(app)
    return typer.main.get_command(app)  # type: ignore[return-value]  # a one-command app's command is a TyperCommand


def keywords(cmd: TyperCommand) -> dict[str, Any]:
    """keyword -> the command's parameter (an option or an argument)."""
    table: dict[str, Any] = {}
    for param in getattr(cmd, "params", []):
        table[param.name] = param
        for opt in param.opts:
            if opt.startswith("--"):
                table.setdefault(opt[2:].replace("-", "_"), param)
    return table


def parameters(name: str, given: Mapping[str, object], who: str,
               allow: tuple[str, ...] = ()) -> tuple[dict[str, Any], set[str]]:
    """`given` as `fasttrain NAME`'s parameters -> (every parameter's value by its name, defaults filled in; the
    names given, which win over a resumed run's own as flags on the command line do). UserError for a keyword the
    command has not or Python cannot use (`allow`: those the API itself sets, fasttrain.plan()'s dry_run) and for
    a value the command line would refuse."""
    cmd = command(name)
    table = keywords(cmd)
    raw: dict[str, object] = {}
    for key, value in given.items():
        param = table.get(key)
        if param is None:
            names = sorted(k for k in table if k not in NOT_FROM_PYTHON)
            raise UserError([Problem(f"{who}()", f"no keyword {key!r}", _keyword_fix(key, names, who))])
        if (param.name in NOT_FROM_PYTHON or param.name in LAUNCH_FLAGS) and param.name not in allow:
            if value is None or value is False:
                continue
            raise UserError([Problem(f"{who}()", f"{key}= is not taken from Python",
                                     NOT_FROM_PYTHON.get(param.name, NOT_FROM_PYTHON["nproc_per_node"]))])
        if value is not None and not (value is False and getattr(param, "is_flag", False)):
            raw[param.name] = _as_given(param, key, value)
    ctx = cmd.context_class(cmd, info_name=f"fasttrain {name}")
    usage_errors, _, _ = click_exceptions()
    values: dict[str, Any] = {}
    for param in cmd.params:
        try:
            values[param.name] = param.process_value(ctx, raw.get(param.name, param.get_default(ctx)))
        except usage_errors as exc:
            raise UserError([_usage_problem(exc, name)]) from None
    return values, set(raw)


def _as_given(param: Any, key: str, value: object) -> object:
    """A keyword's value as the parameter takes it from a command line: a switch True or False, a repeatable
    flag's items as text, anything else as one text."""
    flag = max((o for o in param.opts if o.startswith("--")), key=len, default=f"--{key}")
    if getattr(param, "is_flag", False):
        if isinstance(value, bool):
            return value
        raise UserError([Problem(flag, f"{key}= is a switch: True or False", f"e.g. {key}=True", value)])
    if getattr(param, "multiple", False):
        items = [f"{k}={v}" for k, v in value.items()] if isinstance(value, Mapping) else \
            list(value) if isinstance(value, (list, tuple)) else [value]
        return [_text(item, key) for item in items]
    if isinstance(value, (list, tuple, set, dict)):
        raise UserError([Problem(flag, f"{key}= takes one value, not a {type(value).__name__}", "", value)])
    return _text(value, key)


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


def _text(value: object, key: str) -> str:
    """A value as a shell would pass it."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    try:
        return value if isinstance(value, str) else str(value)
    except Exception as exc:
        raise UserError([Problem(f"{key}=", f"cannot be written as the flag's text ({type(exc).__name__})",
                                 "give a number or a string")]) from None


def _usage_problem(exc: BaseException, name: str) -> Problem:
    """A click usage error (a value of the wrong type, a missing value) as the command line words it."""
    param = getattr(exc, "param", None)
    opts = getattr(param, "opts", None) or []
    where = opts[0] if opts else (getattr(param, "name", None) or f"fasttrain {name}")
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    return Problem(where, message, f"see `fasttrain {name} --help` (or help(fasttrain.{name}))")
