"""The report's words and tables, from the run's summary: how it ended, the plan (profile, settings and why), the
speed against the forecast, and the summary as the terminal shows it (ui/ending.py's rows). Pure."""
from __future__ import annotations

from typing import Any

from fasttrain.core.format import fmt_clock, fmt_number, plural
from fasttrain.report.gather import RunRecord
from fasttrain.ui.ending import ending_rows

Rows = list[tuple[str, str]]


def status_line(run: RunRecord) -> str:
    """How the run ended, in one line."""
    s = run.summary
    if not s:
        return "no summary.json: the run is still going, or ended without one (a crash, a kill)"
    epochs = int(s.get("epochs_run") or 0)
    if s.get("interrupted"):
        at = s.get("stopped_at") or {}
        line = (f"stopped by {s['interrupted']} at epoch {at.get('epoch')}, batch {at.get('batch')} "
                f"(optimizer step {at.get('step')}); it can resume")
    else:
        line = f"finished after {plural(epochs, 'epoch')}" + (" (stopped early)" if s.get("stopped_early") else "")
    clock = s.get("resumed_clock") or {}
    if clock:
        stopped = clock.get("stopped_s")
        line += (f"; resumed at {fmt_clock(clock.get('before_s') or 0)} on the run's clock"
                 + (f", after a stop of {fmt_clock(stopped)}" if stopped is not None else ""))
    return line


def _value(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, float):
        return fmt_number(value)
    return str(value)


def plan_rows(run: RunRecord) -> Rows:
    s, m = run.summary, run.model
    init = s.get("init") or {}
    rows = [("profile", s.get("profile")), ("model", s.get("model") or m.get("model")), ("data", s.get("data")),
            ("classes", ", ".join(run.class_names) or None), ("image size", m.get("image_size")),
            ("device", s.get("device")), ("precision", s.get("precision")), ("processes", s.get("world_size")),
            ("effective batch", s.get("effective_batch")), ("micro-batch", s.get("micro_batch")),
            ("accumulation", s.get("accumulation_steps")),
            ("starting weights", init.get("weights") or init.get("pretrained") or "random (from scratch)"),
            ("seed", s.get("seed")), ("torch", s.get("torch"))]
    return [(label, text) for label, value in rows for text in [_value(value)] if text]


def plan_notes(run: RunRecord) -> list[str]:
    """Why the plan is what it is: every note the run opened with, then the tuning trial's findings."""
    notes = [str(n) for n in run.summary.get("plan_notes") or []]
    notes += [f"note: {n}" for n in run.summary.get("notes") or []]
    if run.tuning and "skipped" not in run.tuning:
        chosen = ", ".join(f"{k}={v}" for k, v in run.tuning.items() if not isinstance(v, (dict, list)))
        notes.append(f"tuning trial: {chosen}")
    return notes


def speed_rows(run: RunRecord) -> Rows:
    """The verdict, and the forecast's images/s beside the measured ones."""
    s = run.summary
    forecast = (s.get("forecast") or {}).get("images_per_s")
    measured = s.get("train_images_per_s")
    rows: list[tuple[str, Any]] = [
        ("verdict", s.get("verdict") or "too few steps were measured for a verdict"),
        ("measured", None if measured is None else f"{fmt_number(measured)} images/s while training"),
        ("forecast", None if forecast is None else f"{fmt_number(forecast)} images/s"
         + (f" (measured/forecast: {measured / forecast:.2f}x)" if measured and forecast else ""))]
    split = _time_split(run.epochs)
    if split:
        rows.append(("time split", split))
    return [(label, text) for label, value in rows for text in [_value(value)] if text]


def _time_split(epochs: list[dict[str, Any]]) -> str | None:
    """Data wait / host-to-device / compute as shares of the training time of every epoch together."""
    parts = [sum(float(r.get(f"telemetry_{k}_s") or 0.0) for r in epochs) for k in ("data_wait", "h2d", "compute")]
    total = sum(parts)
    if total <= 0:
        return None
    return ", ".join(f"{name} {100 * p / total:.1f}%" for name, p in zip(("data wait", "host-to-device", "compute"),
                                                                          parts))


def summary_rows(run: RunRecord) -> Rows:
    """The run's end as the terminal shows it."""
    return ending_rows(run.summary) if run.summary else []


def compare_rows(runs: list[RunRecord]) -> tuple[list[str], list[list[str]]]:
    """(header, one row per run) for a page comparing runs."""
    header = ["run", "epochs", "best acc@1", "time to best", "images/s", "wall time", "how it ended"]
    rows = []
    for run in runs:
        s = run.summary
        best, epoch = s.get("best_val_acc1"), s.get("best_epoch")
        when = next((r.get("elapsed_s") for r in run.epochs if r.get("epoch") == epoch), None)
        rows.append([run.label, str(s.get("epochs_run", len(run.epochs))),
                     "-" if best is None else f"{100 * best:.1f}% (epoch {epoch})",
                     "-" if when is None else fmt_clock(when),
                     "-" if s.get("train_images_per_s") is None else fmt_number(s["train_images_per_s"]),
                     "-" if s.get("wall_s") is None else fmt_clock(s["wall_s"]), status_line(run)])
    return header, rows
