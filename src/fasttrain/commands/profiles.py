"""`fasttrain profiles list|show|validate`: gather (presets.py) -> compute (profile.py) -> render (here)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import typer

from fasttrain.commands import options
from fasttrain.core import arithmetic as ar
from fasttrain.core.errors import Problem, UserError
from fasttrain.core.console import console, print_json
from fasttrain.core.format import fmt_bytes

if TYPE_CHECKING:
    from fasttrain.profiles.schema import Profile

# presets/profile (Pydantic models) are imported inside the commands: `fasttrain --help` need not build them.

profiles_app = typer.Typer(help="List, show and validate hardware profiles (presets in profiles/ or your own YAML).",
                           no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.add_typer(profiles_app, name="profiles")


def summary_row(name: str, p: Profile) -> dict[str, Any]:
    return {
        "name": name,
        "gpu": p.hardware.gpu or "none (CPU)",
        "vram_gb": p.hardware.vram_gb,
        "batch_size": p.loader.batch_size,
        "accumulation_steps": p.optim.accumulation_steps,
        "num_workers": p.loader.num_workers,
        "precision": p.speed.precision,
        "effective_batch": p.effective_batch,
        "scaled_lr": p.scaled_lr,
        "description": p.description,
    }


@profiles_app.command("list")
def list_cmd(as_json: bool = options.json_option()) -> None:
    """One row per shipped preset."""
    from fasttrain.profiles import presets
    rows, broken = [], []
    for name in presets.preset_names():
        try:
            rows.append(summary_row(name, presets.resolve_file_only(name).profile))
        except UserError as exc:
            broken.append({"name": name, "errors": [p.line() for p in exc.problems]})
    if as_json:
        print_json({"profiles": rows, "invalid": broken})
    else:
        from rich.table import Table
        table = Table(title="fasttrain presets", title_justify="left")
        for col in ("name", "GPU", "VRAM", "batch", "workers", "precision", "effective batch", "scaled LR"):
            table.add_column(col, justify="right" if col not in ("name", "GPU", "precision") else "left")
        for r in rows:
            vram = f"{r['vram_gb']:g} GB" if r["vram_gb"] else "-"
            batch = f"{r['batch_size']}" + (f" x{r['accumulation_steps']}" if r["accumulation_steps"] > 1 else "")
            table.add_row(r["name"], r["gpu"], vram, batch, str(r["num_workers"]), r["precision"],
                          str(r["effective_batch"]), f"{r['scaled_lr']:.4g}")
        out = console()
        out.print(table)
        out.print("Details: fasttrain profiles show NAME   Your own: a YAML file with `extends: NAME`.")
        for b in broken:
            out.print(f"[red]invalid preset {b['name']}[/]: " + "; ".join(b["errors"]))
    if broken:
        raise typer.Exit(1)


def derived_lines(p: Profile, dataset_size: int | None) -> list[tuple[str, str, str]]:
    """(quantity, value, arithmetic) rows for `show`: every derived value with its working."""
    w = p.world_size
    rows = [
        ("world size", str(w), f"{p.world.nodes} nodes x {p.world.gpus_per_node} GPUs per node"),
        ("effective batch", str(p.effective_batch),
         f"{p.loader.batch_size} per device x {p.optim.accumulation_steps} accumulation x {w} devices"),
        ("scaled LR", f"{p.scaled_lr:.6g}",
         f"{p.optim.base_lr:g} x {p.effective_batch} / {p.optim.base_batch} (linear rule)"),
        ("batch bytes", fmt_bytes(p.batch_bytes),
         f"{p.loader.batch_size} x 3 x {p.loader.image_size} x {p.loader.image_size} x 4 B x {p.loader.batch_overhead:g}"),
    ]
    pf = p.loader.prefetch_factor or 2
    used, budget = p.loader_ram_bytes, p.ram_budget_bytes
    procs = f" x {p.world.gpus_per_node} processes" if p.world.gpus_per_node > 1 else ""
    working = (f"{p.loader.num_workers} workers x {pf} prefetch x {fmt_bytes(p.batch_bytes)}{procs}"
               if p.loader.num_workers else "0 workers: one batch in the main process")
    rows.append(("loader RAM per machine", fmt_bytes(used),
                 f"{working}; budget {fmt_bytes(budget)} = {p.hardware.ram_budget_fraction:.0%} of "
                 f"{p.hardware.host_ram_gb:g} GiB"))
    if w > 1:
        rows.append(("total workers", str(p.loader.num_workers * w), f"{p.loader.num_workers} x {w} devices"))
    if dataset_size:
        it = p.iterations_per_epoch(dataset_size)
        op = "floor" if p.loader.drop_last else "ceil"
        rows.append(("iterations per epoch", f"{it:,}",
                     f"{op}({dataset_size:,} / ({p.loader.batch_size} x {w})), drop_last={p.loader.drop_last}"))
        rows.append(("optimizer steps per epoch", f"{ar.optimizer_steps_per_epoch(it, p.optim.accumulation_steps):,}",
                     f"ceil({it:,} / {p.optim.accumulation_steps})"))
    return rows


@profiles_app.command("show")
def show_cmd(
    ref: str = typer.Argument(..., metavar="NAME|FILE", help="A preset name or a profile YAML file."),
    sets: Optional[list[str]] = options.set_option(),
    dataset_size: Optional[int] = typer.Option(
        None, "--dataset-size", min=1, help="Also show iterations per epoch for this many training samples."),
    nproc_per_node: Optional[int] = options.nproc_per_node_option(),
    nnodes: Optional[int] = options.nnodes_option(),
    as_json: bool = options.json_option(),
) -> None:
    """The resolved profile: every value, where it came from, and every derived value with its arithmetic."""
    from fasttrain.profiles import presets
    from fasttrain.train.launch import world_flags
    from fasttrain.profiles.schema import SECTIONS
    res = presets.resolve(ref, sets=sets or [], flags=world_flags(nproc_per_node, nnodes))
    p = res.profile
    if as_json:
        print_json({
            "name": p.name, "sources": res.chain, "profile": p.model_dump(mode="json"),
            "provenance": res.provenance, "derived": p.derived(dataset_size),
            "notes": [n.line() for n in res.notes],
        })
        return
    from rich.table import Table
    out = console()
    out.print(f"[bold]{p.name}[/]  {p.description}")
    out.print("sources, lowest precedence first: default < " + " < ".join(res.chain))
    dumped = p.model_dump(mode="json")
    for section in SECTIONS:
        table = Table(title=section, title_justify="left", show_header=False, box=None, pad_edge=False)
        table.add_column("key", style="cyan")
        table.add_column("value")
        table.add_column("from", style="dim")
        for key, value in dumped[section].items():
            table.add_row(key, "null" if value is None else str(value), res.provenance.get(f"{section}.{key}", ""))
        out.print(table)
    table = Table(title="derived", title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column("quantity", style="cyan")
    table.add_column("value", style="bold")
    table.add_column("arithmetic", style="dim")
    for row in derived_lines(p, dataset_size):
        table.add_row(*row)
    out.print(table)
    for note in res.notes:
        out.print(f"note: {note.line()}")


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
    if as_json:
        print_json({"files": report, "valid": not problems})
        if problems:
            raise typer.Exit(2)
        return
    out = console()
    for ref, r in report.items():
        if r["valid"]:
            out.print(f"ok  {ref}")
            for n in r["notes"]:
                out.print(f"    note: {n}")
    if problems:
        bad = sum(1 for r in report.values() if not r["valid"])
        raise UserError(problems, title=f"{bad} of {len(files)} profile file(s) invalid, {len(problems)} problem(s):")
