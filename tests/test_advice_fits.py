"""Advice that fits the run (issue 25, point 4): no torch.compile for a run too short to repay it; doctor's
measurements say what they were measured on and do not pile up."""
from __future__ import annotations

import io

from loop_helpers import cpu_plan, cpu_report

from fasttrain.profiles.recommend import MAX_MEASURED_NOTES, recommend
from fasttrain.telemetry.verdict import assess, compile_repays
from fasttrain.tuning.store import Measurement, machine_measurements, measured_on

COMPUTE_BOUND = {"steps_seen": 60, "window_steps": 30, "data_wait_fraction": 0.05, "h2d_fraction": 0.0,
                 "compute_fraction": 0.95}


def test_a_four_second_run_is_not_told_to_compile() -> None:
    plan, _ = cpu_plan(speed={"compile": False})
    report = cpu_report()
    long = assess(COMPUTE_BOUND, plan, report, run_s=3600.0)
    short = assess(COMPUTE_BOUND, plan, report, run_s=4.0)
    assert "speed.compile=true" in long.text
    assert "speed.compile=true" not in short.text and short.kind == "compute-bound"
    assert compile_repays(None) and compile_repays(600.0) and not compile_repays(60.0)


def test_the_plain_dashboard_of_a_short_run_does_not_suggest_compile() -> None:
    from fasttrain.ui.dashboard import Dashboard
    plan, _ = cpu_plan(speed={"compile": False})
    out = io.StringIO()
    snap = {**COMPUTE_BOUND, "step_time_s": 0.05, "epoch": 0, "batch_index": 9, "batches_in_epoch": 40}
    with Dashboard(plan, total_batches=80, epochs=2, mode="plain", stream=out, report=cpu_report()) as dash:
        dash.update(snap)
        dash.epoch_end({"epoch": 1, "train_loss": 1.0})
    assert "verdict: compute-bound" in out.getvalue() and "compile" not in out.getvalue()


def _entry(model: str, size: int, setting: str, value: object, date: str) -> dict:
    key = {"machine": "m", "model": model, "data_kind": "images", "image_size": size, "batch": 64, "torch": "t"}
    return {"key": key, "measurements": [{"setting": setting, "value": value, "ratio": 1.5, "source": "train trial",
                                          "date": date}]}


def test_measurements_say_what_they_were_measured_on() -> None:
    entries = {"a": _entry("tiny_cnn", 32, "channels_last", False, "2026-11-20")}
    found = machine_measurements(entries, "m", "t")
    assert found[0].on == "tiny_cnn, 32 px, batch 64"
    assert measured_on({"model": "any", "image_size": 64, "batch": 8}) == "64 px, batch 8"


def test_doctor_lists_a_handful_of_measurements_with_their_model_and_size() -> None:
    entries = {f"e{i}": _entry(f"model{i}", 32 + i, "channels_last", False, f"2026-11-{10 + i:02d}")
               for i in range(17)}
    rec = recommend(cpu_report(), machine_measurements(entries, "m", "t"))
    notes = [n for n in rec.notes if n.startswith("measured here")]
    assert len(notes) == MAX_MEASURED_NOTES
    assert "model16, 48 px, batch 64" in notes[0]  # newest first, with what it was measured on
    assert any(n.startswith("... and 12 older measurements") for n in rec.notes)


def test_measurement_keeps_loading_old_cache_rows() -> None:
    assert Measurement(setting="workers", value=2, ratio=1.9, source="bench loader", date="2026-11-24").on == ""
