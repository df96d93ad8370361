"""Rich tables for `fasttrain bench`: each function prints one bench's result and computes nothing new.

The bench modules gather, measure and summarise (fasttrain/commands/bench.py calls them), and
these functions only lay the summary out on the console they are given.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.core.format import fmt_bytes

if TYPE_CHECKING:
    from rich.console import Console, JustifyMethod

    from fasttrain.bench.loader_sweep import Point
    from fasttrain.train.setup.batch_search import AutoBatch


def bar(value: float, top: float, width: int = 16) -> str:
    """A text bar `width` characters long, filled in proportion to value / top."""
    filled = 0 if top <= 0 else round(width * value / top)
    return "█" * filled + "·" * (width - filled)


# bench loader's columns left out first when the table is wider than the terminal (the result file keeps them all):
# the bar, then the RSS sum, the spread of the rounds, the start-up time.
LOADER_DROP_ORDER = (4, 6, 3, 7)


def fitting_columns(headers: list[str], rows: list[list[str]], width: int, drop_order: tuple[int, ...]) -> list[int]:
    """Indices of the columns to show: all of them, less those in `drop_order` (first first) until every cell fits
    whole in `width` (a heavy-box table: 3 cells of border and padding per column, 1 at the end). Pure."""
    keep = list(range(len(headers)))
    def needed() -> int:
        return sum(max([len(r[i]) for r in rows] + [len(w) for w in headers[i].split()] + [1]) + 3 for i in keep) + 1
    for index in drop_order:
        if needed() <= width:
            break
        keep.remove(index)
    return keep


def render_speedups(result: dict[str, Any], path: Path, out: Console) -> None:
    """`bench speedups`: one row per setting, measured against the notes' claims."""
    from rich.table import Table

    table = Table(title=f"bench speedups: {result['model']} at {result['image_size']} px, batch "
                        f"{result['batch_size']}, {result['device']}; median of {result['rounds']} interleaved "
                        f"rounds x {result['steps']} steps", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("setting", "left"), ("images/s", "right"), ("measured", "right"), ("range", "right"),
        ("the notes claim", "left"), ("verdict / reason", "left"))
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for r in result["rows"]:
        label = r["label"] + (f" ({r['note']})" if r.get("note") else "")
        if r["status"] == "measured":
            table.add_row(label, f"{r['images_per_s']:.1f}", f"{r['speedup']:.2f}x",
                          f"{r['speedup_low']:.2f}-{r['speedup_high']:.2f}", r["claimed_short"], r["verdict"])
        else:
            table.add_row(label, "-", "skipped", "", r["claimed_short"], r["reason"])
    out.print(table)
    out.print("claims: " + "; ".join(f"{r['setting']}: {r['claimed']}" for r in result["rows"]
                                     if r.get("claimed_speedup")))
    total = next((r for r in result["rows"] if r["setting"] == "all" and r["status"] == "measured"), None)
    if total is not None:
        product = result.get("product_of_singles")
        out.print(f"all together: {total['speedup']:.2f}x measured; the notes claim ~3.8x (optimal A10G) / ~3.5x "
                  f"(aggressive A10G)" + (f"; multiplying the single speed-ups measured here predicts "
                                          f"{product:.2f}x" if product else ""))
    if result.get("batch_message"):
        out.print(result["batch_message"])
    for w in result.get("warnings", []):
        out.print(f"warning: {w}")
    out.print(f"result: {path}")


def render_batch(result: dict[str, Any], auto: AutoBatch, path: Path, out: Console) -> None:
    """`bench batch`: every trial of the search, the batch it settled on, and the flags that use it."""
    from rich.table import Table

    search = auto.search
    table = Table(title=f"bench batch: {result['model']} at {result['image_size']} px, {result['precision']}"
                        f"{', channels_last' if result['channels_last'] else ''}, {result['device']}"
                        f"{' (cached)' if search.from_cache else ''}", title_justify="left")
    for col in ("trial", "batch", "result", "seconds", "peak memory"):
        table.add_column(col, justify="right" if col != "result" else "left")
    for i, t in enumerate(search.trials, 1):
        table.add_row(str(i), str(t.batch), "ran" if t.ok else f"OOM ({t.reason[:60]})", f"{t.seconds:.1f}",
                      fmt_bytes(t.peak_memory_bytes) if t.peak_memory_bytes else "-")
    out.print(table)
    out.print(auto.message)
    if result.get("note"):
        out.print(f"note: {result['note']}")
    out.print(f"use it: fasttrain train --set loader.batch_size={auto.batch} "
              f"--set optim.accumulation_steps={auto.accumulation}   (or --batch-size auto)")
    out.print(f"result: {path}")


def render_loader(result: dict[str, Any], points: list[Point], knee: Point, choice: Point, workers_claim: str,
                  path: Path, out: Console) -> None:
    """`bench loader`: images/s and RAM per setting, the knee, the recommendation, and whether it keeps up."""
    from rich.table import Table

    top = max(p.images_per_s for p in points)
    table = Table(title=f"bench loader: {result['data']}, batch {result['batch_size']}, {result['image_size']} px, "
                        f"{result['cores']} cores; median of {result['rounds']} rounds", title_justify="left")
    columns: list[tuple[str, JustifyMethod]] = [
        ("workers", "right"), ("prefetch", "right"), ("images/s", "right"), ("range", "right"), ("", "left"),
        ("RAM (PSS)", "right"), ("RSS sum", "right"), ("start-up", "right"), ("", "left")]
    rows = []
    for p in points:
        key = (p.workers, p.prefetch)
        mark = ", ".join(word for word, at in (("knee", (knee.workers, knee.prefetch)),
                                               ("recommended", (choice.workers, choice.prefetch))) if at == key)
        spread = f"{p.images_per_s_low:.0f}-{p.images_per_s_high:.0f}" if p.images_per_s_low is not None else ""
        rows.append([str(p.workers), str(p.prefetch or "-"), f"{p.images_per_s:.0f}", spread,
                     bar(p.images_per_s, top), fmt_bytes(p.ram_bytes), fmt_bytes(p.rss_bytes), f"{p.startup_s:.2f} s",
                     mark])
    keep = fitting_columns([name for name, _ in columns], rows, out.width, LOADER_DROP_ORDER)
    for i in keep:  # every cell whole: a column that does not fit is left out, never cut to `worke…`
        width = max([len(r[i]) for r in rows] + [len(w) for w in columns[i][0].split()])
        table.add_column(columns[i][0], justify=columns[i][1], no_wrap=True, min_width=width)
    for r in rows:
        table.add_row(*(r[i] for i in keep))
    out.print(table)
    out.print(f"knee: {knee.workers} workers reach {knee.images_per_s:.0f} img/s, "
              f"{knee.images_per_s / top:.0%} of the best ({top:.0f}); more workers stop helping beyond it")
    out.print(f"recommended: num_workers={choice.workers}" +
              (f", prefetch_factor={choice.prefetch}" if choice.prefetch else "") +
              f" ({result['recommended']['reason']})")
    if result.get("speedup_over_0_workers"):
        out.print(f"workers vs loading in the main process: {result['speedup_over_0_workers']:.2f}x measured; "
                  f"the notes claim {workers_claim}")
    if result.get("advice"):
        kept = "" if result["advice"]["recorded"] else " (not recorded: the cache cannot be written)"
        out.print(f"recorded for doctor and for train's plan ({result['image_size']} px, batch "
                  f"{result['batch_size']}): {result['advice']['text']}{kept}")
    out.print(result["training"]["message"])
    if result.get("paths"):
        render_paths(result, out)
    if result.get("batch_message"):
        out.print(result["batch_message"])
    if result.get("profile_written"):
        out.print(f"profile written: {result['profile_written']} (use: fasttrain train --profile "
                  f"{result['profile_written']})")
    out.print(f"result: {path}")


def render_paths(result: dict[str, Any], out: Console) -> None:
    """The input paths compared on a sample of the files: images/s, per core, vs the torchvision baseline, RAM."""
    from rich.table import Table

    table = Table(title=f"input paths on {result['paths_sample_images'] or '?'} sampled files, "
                        f"{result['paths_workers']} workers; median of {result['rounds']} interleaved rounds",
                  title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("path", "left"), ("images/s", "right"), ("per core", "right"), ("per core vs torchvision", "right"),
        ("RAM (PSS)", "right"))
    for col, justify in columns:
        table.add_column(col, justify=justify)
    for r in result["paths"]:
        if r["status"] != "measured":
            table.add_row(r["name"], "-", "-", "", r["reason"])
            continue
        ratio = r.get("per_core_vs_torchvision")
        table.add_row(r.get("label", r["name"]), f"{r['images_per_s']:.0f}", f"{r['images_per_s_per_core']:.0f}",
                      f"{ratio:.2f}x" if ratio else "-", fmt_bytes(r["ram_bytes"]))
    out.print(table)
    out.print(result["paths_recommendation"])


def _compare_cell(d: dict[str, Any] | None) -> str:
    if not d:
        return "-"
    if d.get("images_per_s") is not None:
        return f"{d['images_per_s']:.1f} img/s"
    return ", ".join(f"{k} {v}" for k, v in d.items() if v is not None)


def render_compare(result: dict[str, Any], out: Console) -> None:
    """`bench compare`: the two machines, then images/s of A and B per row and the ratio B/A."""
    from rich.table import Table

    for name in ("a", "b"):
        m = result[name]
        out.print(f"{name.upper()}: {m['created_at']}  {m['hostname']}  {m['cpu']} ({m['cores']} cores)  "
                  f"GPU {', '.join(m['gpus'] or []) or 'none'}  torch {m['torch']}  fasttrain {m['fasttrain']}")
    table = Table(title=f"bench compare: {result['kind']}", title_justify="left")
    for col in ("row", "A", "B", "B / A"):
        table.add_column(col, justify="left" if col == "row" else "right")
    for r in result["rows"]:
        table.add_row(r["key"], _compare_cell(r["a"]), _compare_cell(r["b"]),
                      f"{r['ratio']:.2f}x" if r["ratio"] else "")
    out.print(table)
