"""A busy machine is said, with what it costs, in the verdict, the dashboard and doctor (issue 25, point 1).

The rule on fixed readings; the reader against real competing processes; doctor on a recorded report at the
load the issue measured; the plain dashboard's verdict line."""
from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import time

import pytest
from loop_helpers import cpu_plan, cpu_report

from fasttrain.telemetry.contention import HostReader, busy_text
from fasttrain.telemetry.verdict import assess


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


BURN = "import time\nend = time.time() + 20\nwhile time.time() < end: pass"


def test_the_reader_sees_two_competing_processes() -> None:
    """Two busy loops in real processes that are not the run's (started by a shell that exits, so they are not
    this process's children, as a loader worker would be): the reader counts the CPU they got as others' cores.
    Against what they really got (psutil's reading of their CPU time over the same window), not a fixed figure:
    on a loaded machine (a test suite on 2 cores) two burners may get well under a core between them."""
    import os
    import shlex
    import signal

    import psutil

    started_by = subprocess.run(["sh", "-c", f"for i in 1 2; do {shlex.quote(sys.executable)} -c "
                                 f"{shlex.quote(BURN)} >/dev/null 2>&1 & echo $!; done"],
                                capture_output=True, text=True, timeout=30, check=True)
    pids = [int(p) for p in started_by.stdout.split()]
    try:
        procs = [psutil.Process(pid) for pid in pids]
        time.sleep(0.5)  # the interpreters have started
        reader = HostReader()
        before = [sum(p.cpu_times()[:2]) for p in procs]
        reader()  # the first call sets the baseline; the next one reads the window unsmoothed
        started = time.monotonic()
        time.sleep(2.0)
        sample = reader()
        window = time.monotonic() - started
        burners = sum(sum(p.cpu_times()[:2]) - b for p, b in zip(procs, before, strict=True)) / window
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert burners > 0.1, burners  # they ran
    others = sample.get("cpu_others_cores")
    assert others is not None and others >= 0.75 * burners, (others, burners)
    assert sample.get("cpu_run_cores", 0) < 0.5  # this test process only slept


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
