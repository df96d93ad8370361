"""`fasttrain profiles list|show|validate`: gather (profiles/presets.py) -> compute and render (profiles/view.py)."""
from __future__ import annotations

from typing import Any

import typer

from fasttrain.commands import options
from fasttrain.core.console import console, print_json
from fasttrain.core.errors import Problem, UserError
from fasttrain.profiles import view as profiles_view

# presets/profile (Pydantic models) are imported inside the commands: `fasttrain --help` need not build them.

profiles_app = typer.Typer(help="List, show and validate hardware profiles (presets in profiles/ or your own YAML).",
                           no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(profiles_app, name="profiles")


@profiles_app.command("list")
def list_cmd(as_json: bool = options.json_option()) -> None:
    """One row per shipped preset."""
    from fasttrain.profiles import presets
    from fasttrain.profiles.files import preset_names
    rows, broken = [], []
    for name in preset_names():
        try:
            rows.append(profiles_view.summary_row(name, presets.resolve_file_only(name).profile))
        except UserError as exc:
            broken.append({"name": name, "errors": [p.line() for p in exc.problems]})
    if as_json:
        print_json({"profiles": rows, "invalid": broken})
    else:
        profiles_view.render_list(rows, broken, console())
    if broken:
        raise typer.Exit(1)


@profiles_app.command("show")
def show_cmd(
    ref: str = typer.Argument(..., metavar="NAME|FILE", help="A preset name or a profile YAML file."),
    sets: list[str] | None = options.set_option(),
    dataset_size: int | None = typer.Option(
        None, "--dataset-size", min=1, help="Also show iterations per epoch for this many training samples."),
    nproc_per_node: int | None = options.nproc_per_node_option(),
    nnodes: int | None = options.nnodes_option(),
    as_json: bool = options.json_option(),
) -> None:
    """The resolved profile: every value, where it came from, and every derived value with its arithmetic."""
    from fasttrain.profiles import presets
    from fasttrain.train.parallel.launch import world_flags
    res = presets.resolve(ref, sets=sets or [], flags=world_flags(nproc_per_node, nnodes))
    p = res.profile
    if as_json:
        print_json({
            "name": p.name, "sources": res.chain, "profile": p.model_dump(mode="json"),
            "provenance": res.provenance, "derived": p.derived(dataset_size),
            "notes": [n.line() for n in res.notes],
        })
        return
    profiles_view.render_show(res, dataset_size, console())


@profiles_app.command("validate")
def validate_cmd(
    files: list[str] = typer.Argument(..., metavar="FILE...", help="Profile files (or preset names) to check."),
    as_json: bool = options.json_option(),
) -> None:
    """Check profile files: exit 0 when all are valid, exit 2 listing every problem of every file."""
    from fasttrain.profiles import presets
    report: dict[str, dict[str, Any]] = {}
    problems: list[Problem] = []
    for ref in files:
        try:
            res = presets.resolve_file_only(ref)
            report[ref] = {"valid": True, "errors": [], "notes": [n.line() for n in res.notes]}
        except UserError as exc:
            report[ref] = {"valid": False, "errors": [p.line() for p in exc.problems], "notes": []}
            problems += [Problem(f"{ref}: {p.where}" if not p.where.startswith(ref) else p.where,
                                 p.message, p.fix, p.value) for p in exc.problems]
    bad = sum(1 for r in report.values() if not r["valid"])
    title = f"{bad} of {len(files)} profile file(s) invalid, {len(problems)} problem(s):"
    if as_json:
        if problems:  # cli.main prints the report with the error inside it: one JSON document on stdout
            raise UserError(problems, title=title, result={"files": report, "valid": False})
        print_json({"files": report, "valid": True})
        return
    out = console()
    for ref, r in report.items():
        if r["valid"]:
            out.print(f"ok  {ref}")
            for n in r["notes"]:
                out.print(f"    note: {n}")
    if problems:
        raise UserError(problems, title=title)
