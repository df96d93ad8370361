"""A busy machine is said, with what it costs, in the verdict, the dashboard and doctor (issue 25, point 1).

The rule on fixed readings; the reader against real competing processes; doctor on a recorded report at the
load the issue measured; the plain dashboard's verdict line."""
from __future__ import annotations

import io
import subprocess
import sys
import time

import pytest

from fasttrain.telemetry.contention import HostReader, busy_text
from fasttrain.telemetry.verdict import assess
from loop_helpers import cpu_plan, cpu_report

def two_cores():
    """The recorded CPU machine cut to the issue's 2 cores."""
    report = cpu_report()
    report.cpu.usable_cores = report.cpu.logical_cores = 2
    return report


QUIET_SPLIT = {"steps_seen": 60, "window_steps": 30, "data_wait_fraction": 0.05, "h2d_fraction": 0.03,
               "compute_fraction": 0.92}


def test_busy_text_names_the_others_the_load_and_the_cost() -> None:
    text = busy_text({"cpu_others_cores": 1.9, "cpu_run_cores": 0.5, "load_1m": 1.47}, cores=2, planned_cores=2)
    assert text is not None
    assert "other processes use 1.9 of the 2 cores (load 1.47)" in text
    assert "got 0.5 of the 2 cores it planned for, about 4.0x slower" in text


@pytest.mark.parametrize("others", [None, 0.0, 0.3])
def test_a_quiet_machine_says_nothing(others: float | None) -> None:
    assert busy_text({"cpu_others_cores": others, "cpu_run_cores": 2.0}, cores=2, planned_cores=2) is None


def test_other_processes_on_the_gpu_are_named() -> None:
    text = busy_text({"gpu_other_processes": 2, "gpu_util_pct": 97.0}, cores=8, planned_cores=3)
    assert text is not None and "2 other processes on the GPU" in text and "97%" in text


def test_the_verdict_is_no_longer_compute_bound_on_a_busy_machine() -> None:
    plan, _ = cpu_plan()
    report = two_cores()
    quiet = assess(QUIET_SPLIT, plan, report)
    assert quiet.kind == "compute-bound"
    busy = assess({**QUIET_SPLIT, "cpu_others_cores": 1.9, "cpu_run_cores": 0.4, "load_1m": 1.47}, plan, report)
    assert busy.kind == "busy-machine" and "slower" in busy.text


def test_the_reader_sees_two_competing_processes() -> None:
    """Two busy loops in real child processes: the reader counts them as others' cores, not the run's."""
    burn = [subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 20\nwhile time.time() < end: pass"])
            for _ in range(2)]
    try:
        reader = HostReader()
        reader()
        seen = []
        for _ in range(4):
            time.sleep(0.5)
            seen.append(reader().get("cpu_others_cores"))
    finally:
        for p in burn:
            p.kill()
            p.wait()
    assert seen[-1] is not None and seen[-1] >= 0.5, seen
    assert reader().get("cpu_run_cores", 0) < 0.5  # this test process only slept


def test_doctor_warns_at_the_load_the_issue_measured(cli, tmp_path) -> None:
    import json

    from tests_paths import REPORTS
    report = json.loads((REPORTS / "cpu_only.json").read_text())
    report["cpu"]["load_1m"] = 1.47
    report["cpu"]["usable_cores"] = report["cpu"]["logical_cores"] = 2
    path = tmp_path / "busy.json"
    path.write_text(json.dumps(report))
    result = cli("doctor", "--report-from", str(path), "--json")
    findings = {f["id"]: f for f in json.loads(result.out)["findings"]}
    busy = findings["busy-cpu"]
    assert busy["status"] == "warn" and "load 1.47 on 2 cores" in busy["title"] and "1.7x slower" in busy["detail"]


def test_the_plain_dashboard_says_busy_machine() -> None:
    from fasttrain.ui.dashboard import Dashboard
    plan, _ = cpu_plan()
    out = io.StringIO()
    snap = {**QUIET_SPLIT, "cpu_others_cores": 1.9, "cpu_run_cores": 0.4, "load_1m": 1.47, "epoch": 0,
            "batch_index": 5, "batches_in_epoch": 10}
    with Dashboard(plan, total_batches=10, epochs=1, mode="plain", stream=out, report=two_cores()) as dash:
        dash.update(snap)
        dash.epoch_end({"epoch": 1, "train_loss": 1.0})
    assert "verdict: busy machine: other processes use" in out.getvalue()
