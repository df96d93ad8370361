"""Render an estimate: the Forecast (and --compare / --measure results) as Rich tables. No arithmetic here."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fasttrain.core.format import fmt_bytes, fmt_duration, plural
from fasttrain.estimate.forecast import Forecast

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

    from fasttrain.estimate.result import Estimate


def _num(value: float | None, fmt: str = "{:,.1f}", unit: str = "") -> str:
    return "unknown" if value is None else fmt.format(value) + unit


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def _table(title: str) -> Table:
    from rich.table import Table
    table = Table(title=title, title_justify="left", show_header=False, box=None, pad_edge=False)
    table.add_column("quantity", style="cyan")
    table.add_column("value", style="bold", justify="right")
    table.add_column("working", style="dim")
    return table


def _feed_words(ld: dict[str, Any]) -> str:
    """Whether the measured loader keeps up; without a compute speed to compare with, say so (never "None")."""
    if ld.get("keeps_up") is None or ld.get("workers_needed") is None:
        return "compute speed unknown: cannot say whether it keeps up"
    return "keeps up" if ld["keeps_up"] else f"needs {plural(ld['workers_needed'], 'worker')}"


def render_forecast(fc: Forecast, out: Console, header: str) -> None:
    m, s, sp, sch = fc.model, fc.schedule, fc.speed, fc.schedule
    out.print(header)
    t = _table("model cost (meta device, per sample)")
    t.add_row("parameters", f"{m['params'] / 1e6:,.2f} M", "")
    t.add_row("forward", _num(m["forward_flops_per_sample"] / 1e9, unit=" GFLOP"), "torch.utils.flop_counter")
    t.add_row("training", _num(m["train_flops_per_sample"] / 1e9, unit=" GFLOP"),
              f"forward + backward = "
              f"{m['train_flops_per_sample'] / max(m['forward_flops_per_sample'], 1):.2f} x forward")
    t.add_row("activations", fmt_bytes(m["activation_bytes_per_sample"]),
              f"saved for backward, {m['activation_dtype']}, at {m['image_size']} px")
    out.print(t)

    t = _table(f"schedule and speed on {fc.device['name']}")
    t.add_row("iterations per epoch", f"{s['iterations_per_epoch']:,}",
              f"{'floor' if s['drop_last'] else 'ceil'}"
              f"({s['dataset_size']:,} / ({s['batch_size']} x {s['world_size']}))")
    if s["world_size"] > 1:
        t.add_row("world", f"{s['world_size']} GPUs",
                  f"{plural(s['nodes'], 'machine')} x {plural(s['gpus_per_node'], 'GPU')}; "
                  f"scaling efficiency {sp['multi_device_efficiency']:.0%} (fitted on 8-GPU published rows)")
    t.add_row("total batch", f"{s['effective_batch']:,}",
              f"{s['batch_size']} x {s['accumulation_steps']} accumulation x {plural(s['world_size'], 'device')}; "
              f"LR {s['base_lr']:g} -> {s['scaled_lr']:.4g}")
    t.add_row("plan", f"{s['precision']}",
              f"channels_last={s['channels_last']} compile={s['compile']} tf32={s['tf32']}")
    t.add_row("step time", _num(sp["step_time_s"], "{:.3f}", " s"),
              _num(sp["it_per_s"], "{:.2f}", " it/s") if sp["it_per_s"] else "")
    t.add_row("images/s", _num(sp["images_per_s"], "{:,.0f}"),
              f"per device {_num(sp['images_per_s_per_device'], '{:,.0f}')}")
    t.add_row("epoch", fmt_duration(fc.time["epoch_s"]), "training")
    t.add_row("validation", _validation(fc), _validation_detail(fc))
    t.add_row("total", fmt_duration(fc.time["total_s"]), f"{s['epochs']} epochs" +
              (", each with its validation" if fc.time.get("val_s") is not None else ", validation unknown"))
    standin = f" (the {fc.device['peaks_from']}'s, standing in)" if fc.device.get("peaks_from") else ""
    t.add_row("MFU", _num(sp["mfu"], "{:.0%}"),
              f"of peak {_num((fc.device['peak_flops'] or 0) / 1e12 or None, '{:.1f}', ' TFLOP/s')}{standin}")
    out.print(t)

    mem = fc.memory
    where = "GPU memory (per device)" if fc.device["kind"] == "gpu" else "training memory (host RAM)"
    t = _table(where)
    t.add_row("weights + gradients", fmt_bytes(mem.weights + mem.gradients), "fp32")
    t.add_row("optimizer state", fmt_bytes(mem.optimizer_state), "SGD momentum 1x, Adam/AdamW 2x params")
    if mem.autocast_copies:
        t.add_row("autocast weight copies", fmt_bytes(mem.autocast_copies), "half-precision copy per step")
    if mem.ema:
        t.add_row("moving average (EMA)", fmt_bytes(mem.ema), "a copy of the weights (optim.ema_decay)")
    t.add_row("activations", fmt_bytes(mem.activations),
              f"{fmt_bytes(mem.activation_bytes_per_sample)} x {sch['batch_size']} x allocator overhead")
    if mem.workspace:
        t.add_row("workspace + CUDA context", fmt_bytes(mem.workspace), "")
    cap = "unknown" if mem.capacity is None else fmt_bytes(mem.capacity)
    verdict = "unknown" if mem.fits is None else ("fits" if mem.fits else "DOES NOT FIT")
    t.add_row("total", fmt_bytes(mem.total), f"of {cap}: {verdict}")
    t.add_row("largest batch that fits", "unknown" if mem.largest_batch is None else f"{mem.largest_batch:,}", "")
    out.print(t)

    h = fc.host_ram
    t = _table("host RAM (per machine)")
    t.add_row("loader buffers", fmt_bytes(h.loader_buffers),
              f"workers x prefetch x batch bytes; budget {fmt_bytes(h.loader_budget)}")
    t.add_row("processes", fmt_bytes(h.processes), "main process + workers")
    if h.model_training:
        t.add_row("training state", fmt_bytes(h.model_training), "the CPU trains in RAM")
    t.add_row("total", fmt_bytes(h.total), f"of {fmt_bytes(h.capacity)}: {'fits' if h.fits else 'DOES NOT FIT'}")
    out.print(t)

    _render_loader(fc.loader, out)
    _render_cost(fc, out)
    fix = f"; fix: {fc.bottleneck['fix']}" if fc.bottleneck.get("fix") else ""
    out.print(f"[bold]bottleneck:[/] {fc.bottleneck['name']}: {fc.bottleneck['evidence']}{fix}", highlight=False)
    for u in fc.unknown:
        out.print(f"unknown: {u}")


def _render_loader(ld: dict[str, Any], out: Any) -> None:
    """Workers, the decode rate (measured with --data, or estimated from this CPU) and whether it keeps up."""
    t = _table("data loading")
    cores = f" on {ld['cores']} cores" if ld.get("cores") else ""
    t.add_row("workers", f"{ld['workers']}", f"{ld['total_workers']} in the whole job{cores}")
    if ld["measured"] or ld.get("estimated"):
        label = "per worker" if ld["measured"] else "per core (estimate)"
        t.add_row(label, _num(ld["images_per_s_per_worker"], "{:,.0f}", " images/s"), ld["source"])
        t.add_row("loader", _num(ld["images_per_s"], "{:,.0f}", " images/s"),
                  f"{ld['decoders']} decoding in parallel; {_feed_words(ld)}")
        if ld.get("input_bound_epoch_s"):
            t.add_row("epoch if input-bound", fmt_duration(ld["input_bound_epoch_s"]),
                      f"at {ld['input_bound_images_per_s']:,.0f} images/s per device; give --data DIR to measure "
                      "your files")
    else:
        t.add_row("per worker", "not measured", "give --data DIR to sample decode + augment speed")
    out.print(t)


def _render_cost(fc: Forecast, out: Any) -> None:
    """Cost at the hourly prices of the machine forecast; a GPU without a price says unknown, never another's."""
    c = fc.cost
    priced = c["price_on_demand_per_hour"] is not None or c["price_spot_per_hour"] is not None
    if not priced and fc.device["kind"] != "gpu":
        return
    t = _table("cost")
    if not priced:
        t.add_row("price", "unknown", f"no hourly price for {fc.device['name']}")
    else:
        t.add_row("on-demand", f"{_usd(c['on_demand_per_epoch'])} / epoch", f"{_usd(c['on_demand_per_run'])} per run "
                  f"at {_price(c['price_on_demand_per_hour'])} x {plural(c['machines'], 'machine')}")
        t.add_row("spot", f"{_usd(c['spot_per_epoch'])} / epoch", f"{_usd(c['spot_per_run'])} per run "
                  f"at {_price(c['price_spot_per_hour'])}")
        if c.get("price_source"):
            t.add_row("prices from", "", c["price_source"])
    out.print(t)


def _price(per_hour: float | None) -> str:
    return "unknown $/h" if per_hour is None else f"${per_hour:,.2f}/h"


# Below this many columns the ten-column table cuts its cells (`devi…`, `$18.…`): one line of words a row instead.
WIDE_COMPARE_COLUMNS = 150


def render_compare(rows: list[dict[str, Any]], kind: str, out: Console) -> None:
    from rich.table import Table
    title = f"the same model on every {'preset' if kind == 'presets' else 'GPU in the spec file'}, fastest first"
    if out.width < WIDE_COMPARE_COLUMNS:
        _render_compare_narrow(rows, title, out)
        return
    table = Table(title=title, title_justify="left")
    for col in ("name", "device", "batch", "precision", "images/s", "epoch", "total", "memory", "on-demand", "spot"):
        table.add_column(col, justify="left" if col in ("name", "device", "precision", "memory") else "right")
    for r in rows:
        table.add_row(r["name"], r["device"], str(r["batch_size"]), r["precision"],
                      _num(r["images_per_s"], "{:,.0f}"), fmt_duration(r["epoch_s"]), fmt_duration(r["total_s"]),
                      r["memory_verdict"], _usd(r["on_demand_per_run"]), _usd(r["spot_per_run"]))
    out.print(table)
    _unknowns(rows, out)


def _render_compare_narrow(rows: list[dict[str, Any]], title: str, out: Console) -> None:
    """The same figures as the table, a row's as words that wrap between words (an 80-column terminal)."""
    from rich.table import Table
    table = Table(title=title, title_justify="left", box=None, show_header=False, padding=(0, 1, 0, 0))
    table.add_column("name", no_wrap=True, style="bold")
    table.add_column("figures", ratio=1)
    for r in rows:
        cost = [f"{_usd(r[key])} {label}" for key, label in (("on_demand_per_run", "on demand"),
                                                            ("spot_per_run", "spot")) if _usd(r[key]) != "-"]
        table.add_row(r["name"], f"{r['device']}, batch {r['batch_size']}, {r['precision']}: "
                                 f"{_num(r['images_per_s'], '{:,.0f}')} images/s, epoch {fmt_duration(r['epoch_s'])}, "
                                 f"total {fmt_duration(r['total_s'])}; memory {r['memory_verdict']}"
                                 + (f"; {', '.join(cost)} a run" if cost else ""))
    out.print(table)
    _unknowns(rows, out)


def _unknowns(rows: list[dict[str, Any]], out: Console) -> None:
    for r in rows:
        if r["unknown"]:
            out.print(f"{r['name']}: unknown {'; '.join(r['unknown'])}")


def measure_titles(result: dict[str, Any], forecast_device: str | None) -> tuple[str | None, str, str]:
    """(a line separating the --measure table from a forecast for another device, or None; the table's title;
    its forecast column). --measure runs HERE, so its forecast is for this machine, whatever the profile's GPU."""
    here = result["forecast_for"]
    apart = None
    if forecast_device is not None:
        apart = (f"--measure: the forecast above is for {forecast_device}; the steps run on {here}, so the table "
                 f"below compares a forecast for {here} with the measurement (it checks the method, not the "
                 f"{forecast_device} numbers)")
    title = (f"forecast for {here} (the measurement runs here) vs measured here "
             "(synthetic data, the train step code)")
    return apart, title, f"forecast ({here})"


def render_measure(result: dict[str, Any], out: Console, forecast_device: str | None = None) -> None:
    from rich.table import Table
    apart, title, column = measure_titles(result, forecast_device)
    if apart:
        out.print(apart, highlight=False)
    table = Table(title=title, title_justify="left")
    for col in ("quantity", column, "measured", "measured / forecast"):
        table.add_column(col, justify="left" if col == "quantity" else "right")
    for key, label, fmt in (("images_per_s", "images/s", "{:,.1f}"), ("step_time_s", "step time (s)", "{:.3f}"),
                            ("peak_memory_bytes", "peak memory", None)):
        f, m = result["forecast"].get(key), result["measured"].get(key)
        show = fmt_bytes if fmt is None else fmt.format
        ratio = f"{m / f:.2f}" if f and m else "-"
        table.add_row(label, "unknown" if f is None else show(f), "-" if m is None else show(m), ratio)
    out.print(table)
    out.print(result["note"])


def _validation(fc: Forecast) -> str:
    val_s = fc.time.get("val_s")
    return fmt_duration(val_s)


def _validation_detail(fc: Forecast) -> str:
    """How many images each epoch validates, and whether mirrored (twice the forward passes)."""
    images = fc.time.get("val_images")
    if images is None:
        return "the validation images are unknown"
    mirrored = fc.time.get("val_mirrored")
    return f"each epoch: {images:,} images" + (", each also mirrored (augment.test_flip)" if mirrored else "")


def render_estimate(est: Estimate, model: str, out: Console) -> None:
    """`estimate`: the forecast under a title naming the model, profile and device, then the data on a line of its
    own (an assumed ImageNet says so before any figure priced with it); the notes; then the --measure comparison
    and the --compare table when asked."""
    fc, target = est.forecast, est.target
    render_forecast(fc, out, f"[bold]{model}[/] with profile [bold]{est.profile}[/] on {fc.device['name']} "
                             f"({'as the profile describes it' if target.where == 'profile' else target.where})\n"
                             f"data: {est.dataset_size_source}")
    for note in est.notes:
        out.print(f"note: {note}", highlight=False)
    if est.budget is not None:
        b = est.budget
        buys = (f"about {b['epochs']:.1f} epochs ({b['images']:,} images, {b['optimizer_steps']:,} optimizer steps) "
                f"at {b['epoch_s']:.1f} s an epoch with its validation" if b["epochs"] is not None
                else "unknown: no epoch time")
        out.print(f"time budget {fmt_duration(b['budget_s'])}: {buys}; `train --time-budget` plans the same and "
                  "re-plans from the measured steps", highlight=False)
    if est.measured is not None:
        render_measure(est.measured, out, None if target.where == "this machine" else fc.device["name"])
    if est.compare_rows is not None:
        render_compare(est.compare_rows, est.compare_kind, out)
