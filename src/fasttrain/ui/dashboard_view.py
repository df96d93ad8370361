"""The Rich layout of the live dashboard screen (redrawn from Dashboard.update(), a few times a second).

Kept apart from dashboard.py so that the mode logic stays short; everything here is pure layout:
it reads a ScreenModel (what the Dashboard knows, handed over by value) and a telemetry snapshot and
returns a renderable.

Cost matters here: the redraw runs on the training thread, so every millisecond it takes is a
millisecond of training. Nested rich Tables cost ~10 ms a redraw (measured in
benchmarks/telemetry_overhead.py), so the screen is built from pre-padded Text lines with hand-drawn
bars. The finished epochs are printed above the live region, one line each (dashboard_format.epoch_line).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group
from rich.text import Text

from fasttrain.core.arithmetic import GIB, MIB
from fasttrain.core.format import fmt_bytes, fmt_clock, fmt_number, plural
from fasttrain.hardware.report import HardwareReport
from fasttrain.plan import Plan
from fasttrain.telemetry import verdict as vd
from fasttrain.ui.dashboard_format import (
    epoch_progress_of,
    eta_s,
    fmt_value,
    measured_vs_forecast,
    progress_of,
    rate_unit,
)

VERDICT_STYLE = {"busy-machine": "bold red", "input-bound": "bold red", "transfer-bound": "bold yellow",
                 "host-bound": "bold yellow", "compute-bound": "bold green", "warming-up": "dim"}
BAR_WIDTH = 30
MIN_BAR_WIDTH = 8
LABEL_WIDTH = 10
FORECAST_LABELS = {"images_per_s": "images/s", "step_time_s": "step time", "peak_memory_bytes": "peak GPU memory"}
VALUE_WIDTH = 10
FILLED, EMPTY = "━", "─"   # distinct glyphs: without colour a bar still shows how full it is


def bar(fraction: float | None, width: int = BAR_WIDTH, style: str = "green") -> Text:
    """A bar of `width` cells, round(fraction * width) of them filled (heavy line, in `style`), the rest a thin dim
    line: the two differ in shape as well as colour, so the bar reads on a terminal without colour."""
    filled = 0 if fraction is None else max(0, min(width, round(fraction * width)))
    return Text.assemble((FILLED * filled, style), (EMPTY * (width - filled), "grey23"))


def fit_fields(fields: Sequence[str], steps: Sequence[tuple[int, str | None]], width: int,
               sep: str = " | ") -> str:
    """Join `fields` within `width` cells: while too wide, apply the next step (field index, shorter text or
    None to leave it out), lowest-priority change first."""
    chosen: list[str | None] = list(fields)
    def text() -> str:
        return sep.join(t for t in chosen if t)
    for index, replacement in steps:
        if len(text()) <= width:
            break
        chosen[index] = replacement
    return text()


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
    data_kind: str = "images"              # DataBundle.kind: img/s for images, samples/s for other data
    measured: tuple[Any, ...] = ()         # tuning.store.Measurement made here, for the verdict's advice
    input_gain: str | None = None          # the measured shard factor the input-bound verdict quotes
    elapsed_s: float | None = None         # seconds since the display opened
    run_s: float | None = None             # the whole run's training time at the current rate (the verdict's advice)
    budget_left_s: float | None = None     # seconds to a time budget's deadline: the ETA's cap
    ended: tuple[str, str | None] | None = None  # the run is over: ("done" or "stopped", why), ending.run_state


def screen(model: ScreenModel, snap: dict[str, Any], console: Console) -> Group:
    """The live region, short enough for a 24-row terminal: the finished epochs are not in it but printed above it
    as one line each (dashboard.epoch_end), so the newest stays in view and every epoch stays in the scrollback."""
    width = console.width
    parts: list[Any] = [Text(header(model.plan, width), style="bold"), _progress(model, snap, width)]
    parts += _figures(model, snap)
    parts += _split(snap, width)
    for part in parts:  # fixed-layout lines: crop instead of word-wrapping (wrapping is most of a redraw's cost)
        part.no_wrap, part.overflow = True, "crop"
    if snap:
        verdict = vd.assess(snap, model.plan, model.report, model.measured, model.input_gain, model.run_s)
        parts.append(Text(f"verdict: {verdict.text}", style=VERDICT_STYLE.get(verdict.kind, "")))
    return Group(*parts)


def header(plan: Plan, width: int) -> str:
    """The run in one line of at most `width` cells: profile, device, precision, batch, workers; the device's
    reason, then the long forms, then whole fields at the end give way on a narrow terminal."""
    p = plan
    if p.world_size > 1:
        batch = (f"batch {p.batch_size} x {p.accumulation_steps} accum x {p.world_size} processes = "
                 f"{p.effective_batch} (DDP)", f"batch {p.effective_batch} ({p.world_size} procs)")
        workers = (plural(p.workers, "worker") + " per process", f"{p.workers} wkr/proc")
    else:
        batch = (f"batch {p.batch_size} x {p.accumulation_steps} accum",
                 f"batch {p.batch_size}" + (f"x{p.accumulation_steps}" if p.accumulation_steps > 1 else ""))
        workers = (plural(p.workers, "worker"), f"{p.workers} wkr")
    fields = [f"fasttrain  profile {p.profile_name}", f"{p.device} ({p.device_reason})", str(p.precision),
              batch[0], workers[0]]
    # what gives way first: the device's reason, the long batch and workers, then the workers, the precision
    steps = [(1, str(p.device)), (3, batch[1]), (4, workers[1]), (4, None), (0, f"profile {p.profile_name}"),
             (2, None)]
    return fit_fields(fields, steps, width)


def _progress(model: ScreenModel, snap: dict[str, Any], width: int = 10**6) -> Text:
    """`epoch 2/3 [bar] 40/100 40%  run 47%  282 it/s  18,070 img/s  ETA 0:01:10`: the bar is the epoch's own
    progress; the whole run's is the `run` figure. On a narrow terminal the bar shrinks, then it/s, the run
    figure and the rate give way; the epoch, its batches and the ETA always stay. Once the run is over the ETA's
    place says so: `done`, `done: time budget` when the budget ended the epoch before its last batch, `stopped`."""
    done, total = progress_of(snap, model.total_batches)
    e_done, e_total = epoch_progress_of(snap)
    epoch = (snap.get("epoch") or 0) + 1 if snap else 1
    # a budget's epochs were the forecast's guess (the run re-planned): once it is over, the last one ran is the last
    planned = epoch if model.ended is not None and model.ended[1] == "time budget" else model.epochs
    head = f"epoch {epoch}/{planned} "
    count = f" {e_done:,}/{e_total:,} {e_done / e_total:.0%}" if e_total else f" {e_done:,}"
    # (text, priority): shown in this order; the lowest priority gives way first
    optional = [(f"  run {done / total:.0%}" if total else "", 2), (f"  {fmt_number(snap.get('it_per_s'), 3)} it/s", 1),
                (f"  {fmt_number(snap.get('images_per_s'), 4)} {rate_unit(model.data_kind)}", 4),
                (f"  elapsed {fmt_clock(model.elapsed_s)}" if model.elapsed_s is not None else "", 3)]
    # trained, not yet validated: the epoch's row has not come (a resumed run's rows start at the resume)
    validating = bool(e_total) and e_done >= e_total and (not model.rows or model.rows[-1].get("epoch") != epoch)
    if model.ended is not None:
        word, why = model.ended
        eta = f"  {word}: {why}" if why and e_done < e_total else f"  {word}"
        optional = [part for part in optional if not part[0].startswith("  run ")]  # the run is over
    elif validating:
        eta = "  validating"
    else:
        eta = f"  ETA {fmt_clock(eta_s(snap, model.total_batches, model.budget_left_s))}"
    while True:  # drop optional parts until the line fits with at least a short bar
        fixed = len(head) + len(count) + sum(len(t) for t, _ in optional) + len(eta)
        if width - fixed >= MIN_BAR_WIDTH or not optional:
            break
        optional.remove(min(optional, key=lambda part: part[1]))
    bar_width = min(BAR_WIDTH, width - fixed)
    line = Text(head)
    if bar_width >= MIN_BAR_WIDTH:
        line.append_text(bar(e_done / e_total if e_total else None, width=bar_width, style="magenta"))
    for text in [count, *(t for t, _ in optional), eta]:
        line.append(text)
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
        right.append(_cell("GPU mem", gpu_memory(snap), 0))
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


def gpu_memory(snap: dict[str, Any]) -> str:
    """`5.0 alloc / 6.0 rsvd / 7.0 peak of 24.0 GiB`: one unit for all four (GiB when any is 1 GiB or more), so
    the line fits beside the training figures on an 80-column terminal."""
    values = [snap.get("gpu_mem_allocated_bytes") or 0, snap.get("gpu_mem_reserved_bytes") or 0,
              snap.get("gpu_mem_peak_bytes") or 0]
    total = snap.get("gpu_mem_total_bytes")
    gib = max([*values, total or 0]) >= GIB
    def num(n: float) -> str:
        return f"{n / GIB:.1f}" if gib else f"{n / MIB:,.0f}"
    alloc, rsvd, peak = (num(n) for n in values)
    return f"{alloc} alloc / {rsvd} rsvd / {peak} peak" + (f" of {num(total)}" if total else "") + \
        (" GiB" if gib else " MiB")


def _split(snap: dict[str, Any], width: int = 10**6) -> list[Text]:
    """Where each step's time goes, as bars of the three measured parts (each bar as wide as the line allows,
    at most BAR_WIDTH; its filled length is the fraction of the bar)."""
    bar_width = max(MIN_BAR_WIDTH, min(BAR_WIDTH, width - 10 - 5 - len("  000.0 ms/step")))
    lines = []
    for label, key, style in (("data wait", "data_wait", "red"), ("host->dev", "h2d", "yellow"),
                              ("compute", "compute", "green")):
        frac, per_step = snap.get(f"{key}_fraction"), snap.get(f"{key}_s")
        line = Text(f"{label:>9} ", style="dim")
        line.append_text(bar(frac, width=bar_width, style=style))
        line.append(f" {frac:4.0%}" if frac is not None else "    -")
        if per_step is not None:
            line.append(f"  {per_step * 1000:.1f} ms/step", style="dim")
        lines.append(line)
    return lines
