"""The `fasttrain` command line: wires commands together and imports nothing heavy.

Each command lives in fasttrain/commands/<name>.py and imports torch or timm only inside the
function that runs it, so `fasttrain --help` and `fasttrain profiles ...` stay fast.
Exit codes (docs/architecture.md): 0 ok, 1 the job failed, 2 bad usage or input, 130 interrupted.
"""
from __future__ import annotations

import os
import signal
import sys

# Armed first thing, before any heavy import, when this process is `fasttrain train` (not when imported):
# a signal before training has nothing to save (train/signals/lifecycle.py, which imports only the stdlib).
if os.path.basename(sys.argv[0]) in ("fasttrain", "__main__.py") and \
        [a for a in sys.argv[1:] if not a.startswith("-")][:1] == ["train"]:
    from fasttrain.train.signals.lifecycle import train_signals
    train_signals.before_training()

import contextlib
from typing import TYPE_CHECKING, Any

import typer
from typer.core import TyperGroup

from fasttrain.commands.options import click_exceptions
from fasttrain.core.errors import JobFailed, UserError
from fasttrain.train.parallel import launch

if TYPE_CHECKING:
    from typer._click import Command, Context, Parameter  # Typer's own copy of click (no public path)

# What an option's value is, in the words a help text uses (Typer would show `<int>`, `<path>`, `<list[str]>`).
_PLAIN_METAVARS = {"<int>": "N", "<float>": "X", "<str>": "TEXT", "<path>": "PATH", "<list[str]>": "TEXT",
                   "<int range>": "N", "<float range>": "X"}


def _show_flags_as_flags(command: Command) -> None:
    """A boolean flag (--dry-run, --json, --help) takes no value: give it an empty metavar so the help shows no
    `<bool>` beside it (Typer would, inviting `--dry-run true`, which is refused). Recurses into groups."""
    from typer._click import Context

    params = list(getattr(command, "params", []))
    try:
        help_option = command.get_help_option(Context(command))
    except Exception:
        help_option = None
    for param in params + ([help_option] if help_option is not None else []):
        if getattr(param, "is_flag", False) and getattr(param, "metavar", "") is None:
            param.metavar = ""
        elif getattr(param, "metavar", "") is None and getattr(param, "opts", None):  # `<int>` -> `N`
            try:
                shown = param.display_type(Context(command))
            except Exception:
                continue
            param.metavar = _PLAIN_METAVARS.get(shown)
    for sub in (getattr(command, "commands", None) or {}).values():
        _show_flags_as_flags(sub)


class _Group(TyperGroup):
    """The root group: every command's boolean flags read as flags in --help."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # TyperGroup's own arguments, passed through
        super().__init__(*args, **kwargs)
        _show_flags_as_flags(self)

    def get_params(self, ctx: Context) -> list[Parameter]:
        params = super().get_params(ctx)
        for param in params:  # Typer appends --install-completion / --show-completion after __init__
            if getattr(param, "is_flag", False) and getattr(param, "metavar", "") is None:
                param.metavar = ""
        return params


app = typer.Typer(
    name="fasttrain",
    cls=_Group,
    help="Fast, measured PyTorch training on the machine you have: doctor, profiles, estimate, data, train, "
    "report, predict, bench.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's help layout: at 80 columns Rich's boxes squeezed descriptions to ~23 characters
)


def version_text() -> str:
    """`fasttrain 0.1.0 (Python 3.11.7)`: the installed package's version, read without importing torch."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    try:
        own = version("fasttrain")
    except PackageNotFoundError:  # run from a source tree that was never installed
        own = "unknown (not installed: python -m pip install .)"
    return f"fasttrain {own} (Python {platform.python_version()})"


def _show_version(value: bool) -> None:
    if value:
        print(version_text())
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show the full traceback when a command fails."),
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_show_version, help="Print fasttrain's version and exit."
    ),
) -> None:
    if debug:
        os.environ["FASTTRAIN_DEBUG"] = "1"
    from fasttrain.models.registry import stay_offline

    stay_offline()  # before any command imports huggingface_hub or timm: fasttrain never downloads


def _register() -> None:
    from fasttrain.commands import bench, data, doctor, estimate, predict, profiles, report, train

    for command in (profiles, train, estimate, doctor, bench, data, predict, report):  # the order --help lists
        command.register(app)


_register()


def _debugging(argv: list[str]) -> bool:
    return "--debug" in argv or os.environ.get("FASTTRAIN_DEBUG") == "1"


def _wants_json(argv: list[str]) -> bool:
    """--json among the options (before a `--` that ends them)."""
    return "--json" in (argv[: argv.index("--")] if "--" in argv else argv)


def _json_value(value: object) -> object:
    """A problem's value as JSON can hold it: plain numbers, bools and short strings as they are, anything else
    (nan, a 5,000-digit int, an object) as the same bounded text the one-line reason shows."""
    import math

    from fasttrain.core.errors import MAX_VALUE_CHARS, clip, shown_value

    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int) and abs(value) < 2**63:
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, str):
        return clip(value, MAX_VALUE_CHARS)
    return shown_value(value)


def _print_json_error(
    code: int, problems: list[dict[str, object]], title: str = "", result: dict[str, object] | None = None
) -> None:
    """Under --json an error is a JSON object on stdout too: {"error": {"code", "problems": [{where, message,
    fix, value}]}} (inside the command's own `result` when it has one), so a script reading stdout gets one JSON
    document whatever happens (the reasons also go to stderr)."""
    import json

    error: dict[str, object] = {"code": code, "problems": problems}
    if title:
        error["title"] = title
    print(json.dumps({**(result or {}), "error": error}, indent=2, ensure_ascii=False))
    sys.stdout.flush()


def _user_error_problems(exc: UserError) -> list[dict[str, object]]:
    from fasttrain.core.errors import MAX_LINES, MAX_TEXT_CHARS, MAX_VALUE_CHARS, clip

    rows: list[dict[str, object]] = [
        {
            "where": clip(p.where.rstrip(": "), MAX_VALUE_CHARS + 40),
            "message": clip(p.message, MAX_TEXT_CHARS),
            "fix": clip(p.fix, MAX_TEXT_CHARS),
            "value": _json_value(p.value),
        }
        for p in exc.problems[:MAX_LINES]
    ]
    if len(exc.problems) > MAX_LINES:
        rows.append(
            {
                "where": "",
                "message": f"... and {len(exc.problems) - MAX_LINES:,} more problem(s)",
                "fix": "",
                "value": None,
            }
        )
    return rows


def _usage_error_problems(exc: BaseException) -> list[dict[str, object]]:
    """A click usage error (unknown option, a value of the wrong type) as one problem."""
    param = getattr(exc, "param", None)
    opts = getattr(param, "opts", None) or []
    where = opts[0] if opts else (getattr(param, "name", None) or "usage")
    ctx = getattr(exc, "ctx", None)
    path = getattr(ctx, "command_path", None) or "fasttrain"
    message = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    return [{"where": where, "message": message, "fix": f"see `{path} --help`", "value": None}]


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point: turns our exceptions into exit codes and one-line reasons."""
    argv = sys.argv[1:] if argv is None else argv
    launch.remember_argv(argv)  # `train --nproc-per-node` starts its workers with the same arguments
    usage_errors, exits, aborts = click_exceptions()
    world = launch.worker_world()
    # In a data-parallel job every rank may report the same problem: say which rank speaks.
    me = f"fasttrain[rank {world.rank}]" if world is not None and world.world_size > 1 else "fasttrain"
    try:
        result = app(args=argv, prog_name="fasttrain", standalone_mode=False)
        return int(result or 0) if isinstance(result, int) else 0
    except UserError as exc:
        if _debugging(argv):
            raise
        if _wants_json(argv):
            _print_json_error(exc.exit_code, _user_error_problems(exc), exc.title, exc.result)
        for line in exc.lines():
            print(f"{me}: error: {line}", file=sys.stderr)
        return exc.exit_code
    except JobFailed as exc:
        if _debugging(argv):
            raise
        if _wants_json(argv):  # a script reading stdout gets JSON for a failed job too, with the same reason
            _print_json_error(exc.exit_code, [{"where": "", "message": str(exc), "fix": "", "value": None}])
        print(f"{me}: failed: {exc}", file=sys.stderr)
        return exc.exit_code
    except exits as exc:
        return int(getattr(exc, "exit_code", 0) or 0)
    except usage_errors as exc:
        if _wants_json(argv):
            _print_json_error(2, _usage_error_problems(exc))
        exc.show()  # type: ignore[attr-defined]  # a ClickException: click_exceptions() returns its classes untyped
        return 2
    except aborts:
        print(f"{me}: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    code = main()
    if launch.worker_world() is not None:
        leave_worker(code)
    # The command is done and its output written: a SIGTERM now (a preemption notice just after a run finished)
    # must not turn the exit code into -15 while the interpreter shuts down. SIGKILL still stops it.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(code)


def leave_worker(code: int) -> None:
    """End a torchrun worker whose command is done, without the interpreter's teardown.

    Its process group is destroyed and its files are closed by now, but tearing down what is left of torch's C++
    state at interpreter exit can abort ("terminate called without an active exception", exit 134) after a
    complete run: seen about once in ten resumed 2-process runs on a loaded 2-core machine, which turned a good
    run into a failed job. So the exit handlers run (multiprocessing reaps loader workers, logging flushes), the
    standard streams are flushed, and the process ends at once. Its agent may still end it with SIGTERM."""
    import atexit

    try:
        atexit._run_exitfuncs()  # what a normal exit runs first (the stdlib's own entry point for it)
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


if __name__ == "__main__":
    run()
