"""What `fasttrain profiles list|show` print: summary rows and derived values (pure), and their Rich tables.

The commands (fasttrain/commands/profiles.py) resolve the profiles; these functions turn a resolved
profile into rows and lay the rows out on the console they are given.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fasttrain.core import arithmetic as ar
from fasttrain.core.format import fmt_bytes, plural

if TYPE_CHECKING:
    from rich.console import Console

    from fasttrain.profiles.presets import Resolved
    from fasttrain.profiles.schema import Profile


def summary_row(name: str, p: Profile) -> dict[str, Any]:
    """One preset's line of `profiles list` (also its --json row)."""
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


def derived_lines(p: Profile, dataset_size: int | None) -> list[tuple[str, str, str]]:
    """(quantity, value, arithmetic) rows for `show`: every derived value with its working."""
    w = p.world_size
    rows = [
        ("world size", str(w), f"{plural(p.world.nodes, 'node')} x {plural(p.world.gpus_per_node, 'GPU')} per node"),
        (
            "effective batch",
            str(p.effective_batch),
            f"{p.loader.batch_size} per device x {p.optim.accumulation_steps} accumulation x {plural(w, 'device')}",
        ),
        (
            "scaled LR",
            f"{p.scaled_lr:.6g}",
            f"{p.optim.base_lr:g} x {p.effective_batch} / {p.optim.base_batch} (linear rule)",
        ),
        (
            "batch bytes",
            fmt_bytes(p.batch_bytes),
            f"{p.loader.batch_size} x 3 x {p.loader.image_size} x {p.loader.image_size} x 4 B "
            f"x {p.loader.batch_overhead:g}",
        ),
    ]
    pf = p.loader.prefetch_factor or 2
    used, budget = p.loader_ram_bytes, p.ram_budget_bytes
    procs = f" x {p.world.gpus_per_node} processes" if p.world.gpus_per_node > 1 else ""
    working = (
        f"{plural(p.loader.num_workers, 'worker')} x {pf} prefetch x {fmt_bytes(p.batch_bytes)}{procs}"
        if p.loader.num_workers
        else "0 workers: one batch in the main process"
    )
    rows.append(
        (
            "loader RAM per machine",
            fmt_bytes(used),
            f"{working}; budget {fmt_bytes(budget)} = {p.hardware.ram_budget_fraction:.0%} of "
            f"{p.hardware.host_ram_gb:g} GiB",
        )
    )
    if w > 1:
        rows.append(("total workers", str(p.loader.num_workers * w), f"{p.loader.num_workers} x {plural(w, 'device')}"))
    if dataset_size:
        it = p.iterations_per_epoch(dataset_size)
        op = "floor" if p.loader.drop_last else "ceil"
        rows.append(
            (
                "iterations per epoch",
                f"{it:,}",
                f"{op}({dataset_size:,} / ({p.loader.batch_size} x {w})), drop_last={p.loader.drop_last}",
            )
        )
        rows.append(
            (
                "optimizer steps per epoch",
                f"{ar.optimizer_steps_per_epoch(it, p.optim.accumulation_steps):,}",
                f"ceil({it:,} / {p.optim.accumulation_steps})",
            )
        )
    return rows


def render_list(rows: list[dict[str, Any]], broken: list[dict[str, Any]], out: Console) -> None:
    """`profiles list`: one table row per valid preset, then the presets that failed to load."""
    from rich.table import Table

    table = Table(title="fasttrain presets", title_justify="left")
    cells = []
    for r in rows:
        vram = f"{r['vram_gb']:g} GB" if r["vram_gb"] else "-"
        batch = f"{r['batch_size']}" + (f" x{r['accumulation_steps']}" if r["accumulation_steps"] > 1 else "")
        cells.append(
            (
                r["name"],
                r["gpu"],
                vram,
                batch,
                str(r["num_workers"]),
                r["precision"],
                str(r["effective_batch"]),
                f"{r['scaled_lr']:.4g}",
            )
        )
    # Every column but the GPU's is typed or read whole (`kaggle-t4`, `fp16-mixed`): it keeps its widest cell and
    # header word, so at 80 columns the GPU's name wraps instead of the rest being cut to `kaggle-…`.
    for i, col in enumerate(("name", "GPU", "VRAM", "batch", "workers", "precision", "eff.\nbatch", "scaled\nLR")):
        whole = col != "GPU"
        words = [len(w) for c in cells for w in c[i].split()] if not whole else [len(c[i]) for c in cells]
        width = max([len(c[i]) for c in cells] + [len(w) for w in col.split()]) if whole else max([*words, 3])
        table.add_column(
            col, justify="right" if col not in ("name", "GPU", "precision") else "left", no_wrap=whole, min_width=width
        )
    for row in cells:
        table.add_row(*row)
    out.print(table)
    out.print("Details: fasttrain profiles show NAME   Your own: a YAML file with `extends: NAME`.")
    for b in broken:
        out.print(f"[red]invalid preset {b['name']}[/]: " + "; ".join(b["errors"]))


def render_show(res: Resolved, dataset_size: int | None, out: Console) -> None:
    """`profiles show`: each section's values with where they came from, then the derived values."""
    from rich.table import Table

    from fasttrain.profiles.schema import SECTIONS

    p = res.profile
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
