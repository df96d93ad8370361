"""Plain-text formatting shared by the dashboard's modes and its live view (no Rich, no markup).

Its own module so that dashboard.py (modes, throttling) and dashboard_view.py (the Rich layout) both
depend on it and not on each other.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fasttrain.core.format import fmt_bytes, fmt_clock, fmt_number

if TYPE_CHECKING:
    from fasttrain.plan import Plan

# Epoch-table columns, in order, with their labels. Rows may carry more keys (the loop adds every
# telemetry_* total); those stay in metrics.jsonl so the table fits a terminal.
EPOCH_COLUMNS = {
    "epoch": "epoch", "train_loss": "train loss", "val_loss": "val loss", "val_acc1": "acc@1", "val_acc5": "acc@5",
    "lr": "LR", "images_per_s": "img/s", "telemetry_images_per_s": "img/s", "data_wait_fraction": "data wait",
    "telemetry_data_wait_fraction": "data wait", "telemetry_gpu_util_mean_pct": "GPU util", "time_s": "time",
    "train_s": "train time", "val_s": "val time",
}


# Data that are not images (a custom module:callable data set: sequences, tables...) count samples, not images.
IMAGE_KINDS = ("images", "synthetic")


def rate_unit(data_kind: str = "images") -> str:
    """What a throughput counts: `img/s` for image data, `samples/s` for anything else."""
    return "img/s" if data_kind in IMAGE_KINDS else "samples/s"


def epoch_labels(data_kind: str = "images") -> dict[str, str]:
    """EPOCH_COLUMNS with the throughput columns named for the data kind."""
    unit = rate_unit(data_kind)
    return {k: (unit if v == "img/s" else v) for k, v in EPOCH_COLUMNS.items()}


def fmt_value(key: str, value: Any) -> str:
    """Format by the unit the key names (see telemetry's key conventions)."""
    if value is None:
        return "-"
    if isinstance(value, (str, bool)):
        return str(value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={fmt_value(k, v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    if key.endswith("_bytes"):
        return fmt_bytes(value)
    if key.endswith("_fraction") or "acc" in key:
        return f"{value:.1%}" if value <= 1 else f"{value:.1f}%"
    if key.endswith("_pct"):
        return f"{value:.0f}%"
    if key.endswith("_w"):
        return f"{value:.0f} W"
    if key.endswith("_s") and not key.endswith("per_s"):  # seconds: a clock reading from a minute up
        return fmt_clock(value) if key == "time_s" or value >= 60 else f"{value:.3g} s"
    return fmt_number(value)


# The fields of an epoch's line on a terminal that give way first when it is too narrow (the rest of the row is in
# metrics.jsonl); never dropped: the epoch, the train loss, acc@1, the time.
EPOCH_LINE_DROP_ORDER = ("lr", "val_s", "train_s", "telemetry_gpu_util_mean_pct", "data_wait_fraction",
                         "telemetry_data_wait_fraction", "val_acc5", "images_per_s", "telemetry_images_per_s",
                         "val_loss")


def epoch_line(row: dict[str, Any], epochs: int, width: int | None = None, data_kind: str = "images") -> str:
    """One finished epoch in one line, `epoch 3/12 | train loss 1.04 | val loss 1.02 | acc@1 59.2% | ...`: fields
    give way (EPOCH_LINE_DROP_ORDER) until it fits `width` (a terminal), as timm's log lines keep one per epoch."""
    labels = epoch_labels(data_kind)
    keys = [k for k in epoch_columns([row]) if k != "epoch"]
    def text() -> str:
        return " | ".join([f"epoch {row.get('epoch', '?')}/{epochs}"] +
                          [f"{labels.get(k, k)} {fmt_value(k, row[k])}" for k in keys])
    for key in EPOCH_LINE_DROP_ORDER:
        if width is None or len(text()) <= width:
            break
        if key in keys:
            keys.remove(key)
    return text()


def epoch_columns(rows: list[dict[str, Any]]) -> list[str]:
    """The known columns present in the rows, in EPOCH_COLUMNS order; every key when none is known."""
    present = {k for row in rows for k, v in row.items() if v is not None}  # no all-empty columns
    known = [k for k in EPOCH_COLUMNS if k in present]
    if known:
        return known
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    return keys


def epoch_progress_of(snap: dict[str, Any] | None) -> tuple[int, int]:
    """(batches done, batches) in the current epoch: (0, 0) before the first record."""
    if not snap or snap.get("batch_index") is None:
        return 0, 0
    per_epoch = snap.get("batches_in_epoch") or 0
    done = snap["batch_index"] + 1
    return (min(done, per_epoch) if per_epoch else done), per_epoch


def progress_of(snap: dict[str, Any] | None, total_batches: int) -> tuple[int, int]:
    """(batches done, batches in the run) from the 0-based epoch and batch index of the latest record."""
    if not snap or snap.get("batch_index") is None:
        return 0, total_batches
    per_epoch = snap.get("batches_in_epoch") or 0
    done = (snap.get("epoch") or 0) * per_epoch + snap["batch_index"] + 1
    return min(done, total_batches) if total_batches else done, total_batches


def eta_s(snap: dict[str, Any] | None, total_batches: int, budget_left_s: float | None = None) -> float | None:
    """Training-step time left (validation not included): batches left x the rolling step time, and with a time
    budget never more than the seconds left before its deadline (`budget_left_s`): a budgeted run's batches are the
    forecast's guess and its first step times the warm-up's, so their product ran past the budget (1:59 at 21 s of
    2 min, issue 43), while the run itself re-plans to end at the deadline. Seconds. Pure."""
    if not snap or snap.get("step_time_s") is None:
        return None
    done, total = progress_of(snap, total_batches)
    steps_s = max(0, total - done) * snap["step_time_s"]
    return steps_s if budget_left_s is None else max(0.0, min(steps_s, budget_left_s))


def measured_vs_forecast(snap: dict[str, Any],
                         forecast: dict[str, Any] | None) -> list[tuple[str, Any, Any, float | None]]:
    """(label key, measured, forecast, measured/forecast) for each figure the forecast has."""
    if not forecast:
        return []
    measured = {
        "images_per_s": snap.get("images_per_s"),
        "step_time_s": snap.get("step_time_s"),
        "peak_memory_bytes": snap.get("gpu_mem_peak_bytes"),
    }
    rows = []
    for key, fc in forecast.items():
        if key not in measured or not isinstance(fc, (int, float)):
            continue
        m = measured[key]
        ratio = m / fc if m is not None and fc else None
        rows.append((key, m, fc, ratio))
    return rows


def plain_line(snap: dict[str, Any], epochs: int, total_batches: int, data_kind: str = "images",
               budget_left_s: float | None = None) -> str:
    done, total = progress_of(snap, total_batches)
    per_epoch = snap.get("batches_in_epoch") or 0
    epoch = (snap.get("epoch") or 0) + 1
    batch = (snap.get("batch_index") or 0) + 1
    run = f" (run {done / total:.0%})" if total else ""
    parts = [
        f"epoch {epoch}/{epochs} batch {batch}/{per_epoch}{run}",
        f"{fmt_number(snap.get('it_per_s'), 3)} it/s {fmt_number(snap.get('images_per_s'), 4)} {rate_unit(data_kind)}",
        f"ETA {fmt_clock(eta_s(snap, total_batches, budget_left_s))}",
        f"loss {fmt_number(snap.get('loss'))} lr {fmt_number(snap.get('lr'), 3)}",
    ]
    if snap.get("grad_norm") is not None:
        parts[-1] += f" grad {fmt_number(snap['grad_norm'], 3)}"
    if snap.get("amp_scale") is not None:
        parts[-1] += f" scale {fmt_number(snap['amp_scale'], 3)}"
    if snap.get("data_wait_fraction") is not None:
        parts.append(f"wait {snap['data_wait_fraction']:.0%} h2d {snap['h2d_fraction']:.0%} "
                     f"compute {snap['compute_fraction']:.0%}")
    if snap.get("gpu_mem_allocated_bytes") is not None:
        gpu = (f"GPU {fmt_bytes(snap['gpu_mem_allocated_bytes'])} alloc "
               f"{fmt_bytes(snap.get('gpu_mem_reserved_bytes') or 0)} rsvd "
               f"{fmt_bytes(snap.get('gpu_mem_peak_bytes') or 0)} peak")
        if snap.get("gpu_util_pct") is not None:
            gpu += f" {snap['gpu_util_pct']:.0f}%"
        if snap.get("gpu_power_w") is not None:
            gpu += f" {snap['gpu_power_w']:.0f} W"
        parts.append(gpu)
    if snap.get("host_ram_used_bytes") is not None:
        parts.append(f"RAM {fmt_bytes(snap['host_ram_used_bytes'])} used "
                     f"{fmt_bytes(snap.get('host_ram_available_bytes') or 0)} free")
    return " | ".join(parts)


def plan_line(plan: Plan) -> str:
    """The run in one line, plain mode's first: profile, device (and why), precision, batch and workers; a
    data-parallel run's batch and workers per process. (The live screen fits its own to the width: dashboard_view.)"""
    p = plan
    world = f" x {p.world_size} processes = {p.effective_batch} (DDP)" if p.world_size > 1 else ""
    per = " per process" if p.world_size > 1 else ""
    return (f"profile {p.profile_name} | device {p.device} ({p.device_reason}) | {p.precision} | "
            f"batch {p.batch_size} x {p.accumulation_steps} accumulation{world} | workers {p.workers}{per}")
