"""The report's words and tables, from the run's summary: how it ended, the plan (profile, settings and why), the
speed against the forecast, and the summary as the terminal shows it (ui/ending.py's rows). Pure."""
from __future__ import annotations

from typing import Any

from fasttrain.core.format import fmt_clock, fmt_number, plural
from fasttrain.report.gather import RunRecord
from fasttrain.train.loop.epoch_row import EpochRow
from fasttrain.ui.ending import ending_rows

Rows = list[tuple[str, str]]


def status_line(run: RunRecord) -> str:
    """How the run ended, in one line."""
    s = run.summary
    if not run.has_summary:
        return "no summary.json: the run is still going, or ended without one (a crash, a kill)"
    if s.interrupted:
        at = s.stopped_at
        where = f"at epoch {at.epoch}, batch {at.batch} (optimizer step {at.step})" if at is not None else "at ?"
        line = f"stopped by {s.interrupted} {where}; it can resume"
    else:
        line = f"finished after {plural(s.epochs_run or 0, 'epoch')}" + (" (stopped early)" if s.stopped_early else "")
    clock = s.resumed_clock
    if clock is not None:
        line += (f"; resumed at {fmt_clock(clock.before_s or 0)} on the run's clock"
                 + (f", after a stop of {fmt_clock(clock.stopped_s)}" if clock.stopped_s is not None else ""))
    return line


def _value(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, float):
        return fmt_number(value)
    return str(value)


def plan_rows(run: RunRecord) -> Rows:
    s, m = run.summary, run.model
    known = run.has_summary  # an empty record's defaults (1 process, batch 0) are no figures of this run
    rows = [("profile", s.profile), ("model", s.model or m.get("model")), ("data", s.data),
            ("classes", ", ".join(run.class_names) or None), ("image size", m.get("image_size")),
            ("device", s.device), ("precision", s.precision), ("processes", s.world_size if known else None),
            ("effective batch", s.effective_batch if known else None), ("micro-batch", s.micro_batch),
            ("accumulation", s.accumulation_steps if known else None),
            ("starting weights", s.init.weights or s.init.pretrained or "random (from scratch)"),
            ("seed", s.seed), ("torch", s.torch)]
    return [(label, text) for label, value in rows for text in [_value(value)] if text]


def plan_notes(run: RunRecord) -> list[str]:
    """Why the plan is what it is: every note the run opened with, then the tuning trial's findings."""
    notes = [str(n) for n in run.summary.plan_notes]
    notes += [f"note: {n}" for n in run.summary.notes]
    if run.tuning and "skipped" not in run.tuning:
        chosen = ", ".join(f"{k}={v}" for k, v in run.tuning.items() if not isinstance(v, (dict, list)))
        notes.append(f"tuning trial: {chosen}")
    return notes


def speed_rows(run: RunRecord) -> Rows:
    """The verdict, and the forecast's images/s beside the measured ones."""
    s = run.summary
    forecast = s.forecast.images_per_s if s.forecast is not None else None
    measured = s.train_images_per_s
    rows: list[tuple[str, Any]] = [
        ("verdict", s.verdict or "too few steps were measured for a verdict"),
        ("measured", None if measured is None else f"{fmt_number(measured)} images/s while training"),
        ("forecast", None if forecast is None else f"{fmt_number(forecast)} images/s"
         + (f" (measured/forecast: {measured / forecast:.2f}x)" if measured and forecast else ""))]
    split = _time_split(run.epochs)
    if split:
        rows.append(("time split", split))
    return [(label, text) for label, value in rows for text in [_value(value)] if text]


def _time_split(epochs: list[EpochRow]) -> str | None:
    """Data wait / host-to-device / compute as shares of the training time of every epoch together."""
    figures = [r.telemetry for r in epochs if r.telemetry is not None]
    parts = [sum(float(f.data_wait_s or 0.0) for f in figures), sum(float(f.h2d_s or 0.0) for f in figures),
             sum(float(f.compute_s or 0.0) for f in figures)]
    total = sum(parts)
    if total <= 0:
        return None
    return ", ".join(f"{name} {100 * p / total:.1f}%" for name, p in zip(("data wait", "host-to-device", "compute"),
                                                                          parts, strict=True))


def summary_rows(run: RunRecord) -> Rows:
    """The run's end as the terminal shows it."""
    return ending_rows(run.summary) if run.has_summary else []


def compare_rows(runs: list[RunRecord]) -> tuple[list[str], list[list[str]]]:
    """(header, one row per run) for a page comparing runs."""
    header = ["run", "epochs", "best acc@1", "time to best", "images/s", "wall time", "how it ended"]
    rows = []
    for run in runs:
        s = run.summary
        best, epoch = s.best_val_acc1, s.best_epoch
        when = next((r.elapsed_s for r in run.epochs if r.epoch == epoch), None)
        rows.append([run.label, str(len(run.epochs) if s.epochs_run is None else s.epochs_run),
                     "-" if best is None else f"{100 * best:.1f}% (epoch {epoch})",
                     "-" if when is None else fmt_clock(when),
                     "-" if s.train_images_per_s is None else fmt_number(s.train_images_per_s),
                     "-" if s.wall_s is None else fmt_clock(s.wall_s), status_line(run)])
    return header, rows
