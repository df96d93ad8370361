"""The Rich layout of the live dashboard screen (drawn on Rich's refresh thread, a few times a second).

Kept apart from dashboard.py so that the mode logic stays short; everything here is pure layout:
it reads the Dashboard's stored state and a telemetry snapshot and returns a renderable.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from fasttrain import arithmetic as ar
from fasttrain import verdict as vd
from fasttrain.dashboard import (LIVE_EPOCH_ROWS, eta_s, fmt_duration, fmt_num, fmt_value, measured_vs_forecast,
                                 progress_of)

if TYPE_CHECKING:
    from fasttrain.dashboard import Dashboard

VERDICT_STYLE = {"input-bound": "bold red", "transfer-bound": "bold yellow", "host-bound": "bold yellow",
                 "compute-bound": "bold green", "warming-up": "dim"}
BAR_WIDTH = 30


def screen(dash: "Dashboard", snap: dict[str, Any]) -> Group:
    parts: list[Any] = [Text(f"fasttrain  {dash._header()}", style="bold"), _progress(dash, snap)]
    parts.append(_figures(dash, snap))
    parts.append(_split(snap))
    verdict = vd.assess(snap, dash.plan, dash.report) if snap else None
    if verdict is not None:
        parts.append(Text(f"verdict: {verdict.text}", style=VERDICT_STYLE.get(verdict.kind, "")))
    rows = dash._rows[-LIVE_EPOCH_ROWS:]
    if rows:
        parts.append(epoch_table(rows))
    return Group(*parts)


def _progress(dash: "Dashboard", snap: dict[str, Any]) -> Table:
    done, total = progress_of(snap, dash.total_batches)
    epoch = (snap.get("epoch") or 0) + 1 if snap else 1
    grid = Table.grid(padding=(0, 1))
    grid.add_row(
        Text(f"epoch {epoch}/{dash.epochs}"),
        ProgressBar(total=max(total, 1), completed=done, width=BAR_WIDTH),
        Text(f"{done}/{total} {done / total:.0%}" if total else f"{done}"),
        Text(f"{fmt_num(snap.get('it_per_s'), 3)} it/s"),
        Text(f"{fmt_num(snap.get('images_per_s'), 4)} img/s"),
        Text(f"ETA {fmt_duration(eta_s(snap, dash.total_batches))}"),
    )
    return grid


def _figures(dash: "Dashboard", snap: dict[str, Any]) -> Table:
    """Training values | device & host | measured beside forecast, as three small columns."""
    train = Table.grid(padding=(0, 1))
    for label, key in (("loss", "loss"), ("LR", "lr"), ("grad norm", "grad_norm"), ("AMP scale", "amp_scale")):
        train.add_row(Text(label, style="dim"), Text(fmt_num(snap.get(key))))
    if snap.get("skipped_steps"):
        train.add_row(Text("skipped", style="dim"), Text(str(snap["skipped_steps"])))

    hw = Table.grid(padding=(0, 1))
    if snap.get("gpu_mem_allocated_bytes") is not None:
        total = snap.get("gpu_mem_total_bytes")
        hw.add_row(Text("GPU mem", style="dim"), Text(
            f"{ar.human_bytes(snap['gpu_mem_allocated_bytes'])} alloc / "
            f"{ar.human_bytes(snap.get('gpu_mem_reserved_bytes') or 0)} rsvd / "
            f"{ar.human_bytes(snap.get('gpu_mem_peak_bytes') or 0)} peak"
            + (f" of {ar.human_bytes(total)}" if total else "")))
    if snap.get("gpu_util_pct") is not None:
        power = snap.get("gpu_power_w")
        limit = snap.get("gpu_power_limit_w")
        watts = f", {power:.0f}" + (f"/{limit:.0f}" if limit else "") + " W" if power is not None else ""
        hw.add_row(Text("GPU util", style="dim"), Text(f"{snap['gpu_util_pct']:.0f}%{watts}"))
    elif snap.get("nvml_reason"):
        hw.add_row(Text("GPU", style="dim"), Text(str(snap["nvml_reason"]), style="dim"))
    if snap.get("host_ram_used_bytes") is not None:
        hw.add_row(Text("host RAM", style="dim"), Text(
            f"{ar.human_bytes(snap['host_ram_used_bytes'])} used, "
            f"{ar.human_bytes(snap.get('host_ram_available_bytes') or 0)} free"))
    if snap.get("process_rss_bytes") is not None:
        hw.add_row(Text("run RSS", style="dim"), Text(ar.human_bytes(snap["process_rss_bytes"])))

    outer = Table.grid(padding=(0, 4))
    cols: list[Any] = [train, hw]
    rows = measured_vs_forecast(snap, dash.forecast)
    if rows:
        fc = Table(box=None, padding=(0, 1), show_edge=False)
        for header in ("", "measured", "forecast", "ratio"):
            fc.add_column(header, style="dim" if not header else None, justify="right" if header else "left")
        for key, m, f, ratio in rows:
            fc.add_row(key.replace("_", " "), fmt_value(key, m), fmt_value(key, f),
                       f"{ratio:.2f}x" if ratio is not None else "-")
        cols.append(fc)
    outer.add_row(*cols)
    return outer


def _split(snap: dict[str, Any]) -> Table:
    """Where each step's time goes, as bars of the three measured parts."""
    grid = Table.grid(padding=(0, 1))
    for label, key, style in (("data wait", "data_wait", "red"), ("host->dev", "h2d", "yellow"),
                              ("compute", "compute", "green")):
        frac = snap.get(f"{key}_fraction")
        per_step = snap.get(f"{key}_s")
        grid.add_row(
            Text(f"{label:>9}", style="dim"),
            ProgressBar(total=1.0, completed=frac or 0.0, width=BAR_WIDTH, complete_style=style,
                        finished_style=style),
            Text(f"{frac:4.0%}" if frac is not None else "   -"),
            Text(f"{per_step * 1000:.1f} ms/step" if per_step is not None else "", style="dim"),
        )
    return grid


def epoch_table(rows: list[dict[str, Any]]) -> Table:
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    table = Table(title="epochs", title_justify="left")
    for key in keys:
        table.add_column(key.replace("_", " "), justify="right")
    for row in rows:
        table.add_row(*(fmt_value(k, row.get(k)) for k in keys))
    return table
