"""The Rich layout of the live dashboard screen (redrawn from Dashboard.update(), a few times a second).

Kept apart from dashboard.py so that the mode logic stays short; everything here is pure layout:
it reads a ScreenModel (what the Dashboard knows, handed over by value) and a telemetry snapshot and
returns a renderable.

Cost matters here: the redraw runs on the training thread, so every millisecond it takes is a
millisecond of training. Nested rich Tables cost ~10 ms a redraw (measured in
benchmarks/telemetry_overhead.py), so the screen is built from pre-padded Text lines with hand-drawn
bars, and the epoch table -- which changes once an epoch -- is rendered once and reused.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Group
from rich.segment import Segment, Segments
from rich.table import Table
from rich.text import Text

from fasttrain.core.format import fmt_bytes, fmt_clock, fmt_number
from fasttrain.telemetry import verdict as vd
from fasttrain.ui.dashboard_format import (EPOCH_COLUMNS, LIVE_EPOCH_ROWS, epoch_columns, eta_s, fmt_value,
                                           measured_vs_forecast, progress_of)
from fasttrain.hardware.report import HardwareReport
from fasttrain.plan import Plan

VERDICT_STYLE = {"input-bound": "bold red", "transfer-bound": "bold yellow", "host-bound": "bold yellow",
                 "compute-bound": "bold green", "warming-up": "dim"}
BAR_WIDTH = 30
LABEL_WIDTH = 10
FORECAST_LABELS = {"images_per_s": "images/s", "step_time_s": "step time", "peak_memory_bytes": "peak GPU memory"}
VALUE_WIDTH = 12


def bar(fraction: float | None, width: int = BAR_WIDTH, style: str = "green") -> Text:
    """A progress bar of `width` cells: filled part in `style`, the rest dim."""
    filled = 0 if fraction is None else max(0, min(width, round(fraction * width)))
    return Text.assemble(("━" * filled, style), ("━" * (width - filled), "grey23"))


@dataclass(frozen=True)
class ScreenModel:
    """What one redraw of the live screen shows besides the snapshot."""

    header: str                            # the run's one-line description (profile, device, precision, batch)
    plan: Plan
    report: HardwareReport | None
    forecast: dict[str, Any] | None        # the `estimate` forecast, shown beside the measured figures
    total_batches: int                     # loader batches over the whole run
    epochs: int
    rows: Sequence[dict[str, Any]]         # every finished epoch's row, oldest first


class EpochTable:
    """The epoch table rendered once per new row (it is the costliest part to lay out), then reused."""

    def __init__(self) -> None:
        self._key: tuple[int, int] | None = None   # (rows rendered, console width)
        self._segments: Segments | None = None

    def segments(self, rows: Sequence[dict[str, Any]], console: Any) -> Segments | None:
        if not rows:
            return None
        key = (len(rows), console.width)
        if self._segments is None or self._key != key:
            lines = console.render_lines(epoch_table(list(rows[-LIVE_EPOCH_ROWS:])), console.options, pad=False)
            segments: list[Segment] = []
            for line in lines:
                segments += line
                segments.append(Segment.line())
            self._key, self._segments = key, Segments(segments)
        return self._segments


def screen(model: ScreenModel, snap: dict[str, Any], epochs: EpochTable, console: Any) -> Group:
    parts: list[Any] = [Text(f"fasttrain  {model.header}", style="bold"), _progress(model, snap)]
    parts += _figures(model, snap)
    parts += _split(snap)
    for part in parts:  # fixed-layout lines: crop instead of word-wrapping (wrapping is most of a redraw's cost)
        part.no_wrap, part.overflow = True, "crop"
    if snap:
        verdict = vd.assess(snap, model.plan, model.report)
        parts.append(Text(f"verdict: {verdict.text}", style=VERDICT_STYLE.get(verdict.kind, "")))
    cached = epochs.segments(model.rows, console)
    if cached is not None:
        parts.append(cached)
    return Group(*parts)


def _progress(model: ScreenModel, snap: dict[str, Any]) -> Text:
    done, total = progress_of(snap, model.total_batches)
    epoch = (snap.get("epoch") or 0) + 1 if snap else 1
    line = Text(f"epoch {epoch}/{model.epochs} ")
    line.append_text(bar(done / total if total else None, style="magenta"))
    line.append(f" {done}/{total} {done / total:.0%}" if total else f" {done}")
    line.append(f"  {fmt_number(snap.get('it_per_s'), 3)} it/s  {fmt_number(snap.get('images_per_s'), 4)} img/s"
                f"  ETA {fmt_clock(eta_s(snap, model.total_batches))}")
    return line


def _cell(label: str, value: str, width: int = VALUE_WIDTH) -> Text:
    return Text.assemble((f"{label:<{LABEL_WIDTH}}", "dim"), f"{value:<{width}}")


def _figures(model: ScreenModel, snap: dict[str, Any]) -> list[Text]:
    """Training values on the left, device and host on the right; measured beside forecast below."""
    left = [_cell(label, fmt_number(snap.get(key))) for label, key in
            (("loss", "loss"), ("LR", "lr"), ("grad norm", "grad_norm"), ("AMP scale", "amp_scale"))]
    if snap.get("skipped_steps"):
        left.append(_cell("skipped", str(snap["skipped_steps"])))
    right: list[Text] = []
    if snap.get("gpu_mem_allocated_bytes") is not None:
        total = snap.get("gpu_mem_total_bytes")
        right.append(_cell("GPU mem", f"{fmt_bytes(snap['gpu_mem_allocated_bytes'])} alloc / "
                                      f"{fmt_bytes(snap.get('gpu_mem_reserved_bytes') or 0)} rsvd / "
                                      f"{fmt_bytes(snap.get('gpu_mem_peak_bytes') or 0)} peak"
                                      + (f" of {fmt_bytes(total)}" if total else ""), 0))
    if snap.get("gpu_util_pct") is not None:
        power, limit = snap.get("gpu_power_w"), snap.get("gpu_power_limit_w")
        watts = "" if power is None else f", {power:.0f}" + (f"/{limit:.0f}" if limit else "") + " W"
        right.append(_cell("GPU util", f"{snap['gpu_util_pct']:.0f}%{watts}", 0))
    elif snap.get("nvml_reason"):
        right.append(Text.assemble((f"{'GPU':<{LABEL_WIDTH}}", "dim"), (str(snap["nvml_reason"]), "dim")))
    if snap.get("host_ram_used_bytes") is not None:
        right.append(_cell("host RAM", f"{fmt_bytes(snap['host_ram_used_bytes'])} used, "
                                       f"{fmt_bytes(snap.get('host_ram_available_bytes') or 0)} free", 0))
    if snap.get("process_rss_bytes") is not None:
        right.append(_cell("run RSS", fmt_bytes(snap["process_rss_bytes"]), 0))
    lines = []
    for i in range(max(len(left), len(right))):
        line = left[i].copy() if i < len(left) else Text(" " * (LABEL_WIDTH + VALUE_WIDTH))
        line.append("  ")
        if i < len(right):
            line.append_text(right[i])
        lines.append(line)
    rows = measured_vs_forecast(snap, model.forecast)
    if rows:
        lines.append(Text(f"{'':<18}{'measured':>12}{'forecast':>12}{'ratio':>8}", style="dim"))
        for key, m, f, ratio in rows:
            lines.append(Text(f"{FORECAST_LABELS.get(key, key):<18}{fmt_value(key, m):>12}{fmt_value(key, f):>12}"
                              f"{(f'{ratio:.2f}x' if ratio is not None else '-'):>8}"))
    return lines


def _split(snap: dict[str, Any]) -> list[Text]:
    """Where each step's time goes, as bars of the three measured parts."""
    lines = []
    for label, key, style in (("data wait", "data_wait", "red"), ("host->dev", "h2d", "yellow"),
                              ("compute", "compute", "green")):
        frac, per_step = snap.get(f"{key}_fraction"), snap.get(f"{key}_s")
        line = Text(f"{label:>9} ", style="dim")
        line.append_text(bar(frac, style=style))
        line.append(f" {frac:4.0%}" if frac is not None else "    -")
        if per_step is not None:
            line.append(f"  {per_step * 1000:.1f} ms/step", style="dim")
        lines.append(line)
    return lines


def epoch_table(rows: list[dict[str, Any]]) -> Table:
    keys = epoch_columns(rows)
    table = Table(title="epochs", title_justify="left")
    for key in keys:
        table.add_column(EPOCH_COLUMNS.get(key, key.replace("_", " ")), justify="right")
    for row in rows:
        table.add_row(*(fmt_value(k, row.get(k)) for k in keys))
    return table
