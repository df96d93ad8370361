"""The dashboard's ETA and last frame (issue 43 item 5): with a time budget the ETA never passes the budget's end (the
first ETA read 1:59 at 21 s of a 2 min budget), and the frame left on the screen when a run ends says it is done
(it read `45/46 98%` with an ETA, the budget having ended the last epoch a batch before its end)."""
from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from fasttrain.hardware.report import CpuInfo, HardwareReport, MemoryInfo
from fasttrain.plan import make_plan
from fasttrain.profiles import presets
from fasttrain.telemetry.recorder import Telemetry
from fasttrain.telemetry.step_record import StepRecord
from fasttrain.train.loop.epoch_row import EpochRow
from fasttrain.train.loop.events import RunEnd, StepEvent
from fasttrain.train.run.summary import RunSummary
from fasttrain.ui import dashboard_format as dbf
from fasttrain.ui.dashboard import Dashboard

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
# What the user saw, 21 s into `--time-budget 2m`: the display planned 20 epochs of 46 batches from the forecast,
# and 10 batches in, the warm-up's step time (0.1309 s) priced the 910 left at 1:59.
BUDGET_S, AT_S = 120.0, 21.0
FIRST = {"epoch": 0, "batch_index": 9, "batches_in_epoch": 46, "step_time_s": 0.1309, "it_per_s": 7.6,
         "images_per_s": 489.0}


@pytest.fixture
def plan():
    report = HardwareReport(cpu=CpuInfo(logical_cores=2),
                            memory=MemoryInfo(ram_total_bytes=8 * 2**30, ram_available_bytes=6 * 2**30))
    return make_plan(presets.resolve("cpu").profile, report, dataset_size=6400)


def test_eta_is_capped_by_the_time_left_in_the_budget() -> None:
    assert fmt(dbf.eta_s(FIRST, 920)) == "0:01:59"  # the recorded ETA, without the budget
    assert dbf.eta_s(FIRST, 920, budget_left_s=BUDGET_S - AT_S) == pytest.approx(99.0)
    assert dbf.eta_s(FIRST, 920, budget_left_s=500.0) == pytest.approx(910 * 0.1309)  # the steps end first
    assert dbf.eta_s(FIRST, 920, budget_left_s=-3.0) == 0.0  # past the deadline: nothing left, never negative
    assert dbf.eta_s({}, 920, budget_left_s=99.0) is None   # nothing measured yet


def fmt(seconds: float | None) -> str:
    from fasttrain.core.format import fmt_clock
    return fmt_clock(seconds)


def _progress_lines(text: str, epoch: str) -> list[str]:
    return [ln for ln in ANSI.sub("", text).splitlines() if ln.startswith(f"epoch {epoch} ") and "━" in ln + "─"
            and " | " not in ln]


def test_the_live_screen_and_the_plain_lines_keep_the_eta_inside_the_budget(plan) -> None:
    start = 1_000_000.0  # time.time() at the launch
    wall = [start + AT_S]
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=80)
    with Dashboard(plan, total_batches=920, epochs=20, mode="live", console=console, deadline=start + BUDGET_S,
                   wall_clock=lambda: wall[0]) as dash:
        dash.update(FIRST, None)
        console.print(dash.render())
    progress = _progress_lines(buf.getvalue(), "1/20")[-1]
    assert "ETA 0:01:39" in progress, progress
    out, clock = io.StringIO(), [0.0]
    with Dashboard(plan, total_batches=920, epochs=20, mode="plain", stream=out, plain_every_s=1.0,
                   clock=lambda: clock[0], deadline=start + BUDGET_S, wall_clock=lambda: wall[0]) as dash:
        dash.update(FIRST, None)
        clock[0] = 2.0
        dash.update(FIRST, None)
    assert "ETA 0:01:39" in out.getvalue(), out.getvalue()


def _run_frames(plan, last_epoch_batches: int, summary: dict, epochs: int = 20) -> str:
    """A recorded run fed through the listener protocol, as the loop calls it: the last of 20 epochs of 46 batches
    ends after `last_epoch_batches`, then its row, then the run's end; the display was told `epochs` (a budget's:
    the forecast's guess). -> everything the terminal received."""
    clock = [0.0]
    tel = Telemetry("cpu", clock=lambda: clock[0], host_reader=dict)
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=80)
    dash = Dashboard(plan, total_batches=46 * epochs, epochs=epochs, mode="live", console=console, telemetry=tel,
                     clock=lambda: clock[0])
    with dash:
        for i in range(last_epoch_batches):
            clock[0] += 0.13
            record = StepRecord(19, 19 * 46 + i + 1, i, 46, 64, 0.01, 0.0, 0.12, loss=0.4, lr=1e-6, batch_size=64)
            tel.record(record)
            dash.on_step(StepEvent(record, tel.snapshot()))
        dash.on_epoch_end(EpochRow.from_json({"epoch": 20, "train_loss": 0.4, "val_acc1": 0.88, "time_s": 6.0}))
        dash.on_run_end(RunEnd(RunSummary.from_json(summary)))
    return buf.getvalue()


def test_the_last_frame_of_a_finished_run_shows_the_whole_epoch_done(plan) -> None:
    last = _progress_lines(_run_frames(plan, 46, {"epochs_run": 20, "run_dir": "runs/x"}), "20/20")[-1]
    assert "46/46 100%" in last and last.rstrip().endswith("done") and "ETA" not in last, last


def test_the_last_frame_of_a_run_the_budget_ended_says_so(plan) -> None:
    """The budget's last step fell on batch 45 of 46: the frame left on screen read `45/46 98%  ETA 0:00:00`."""
    summary = {"epochs_run": 20, "run_dir": "runs/x",
               "time_budget": {"budget_s": 120.0, "used_s": 118.4, "margin_s": 1.6, "source": "--time-budget"}}
    last = _progress_lines(_run_frames(plan, 45, summary, epochs=23), "20/20")[-1]
    assert "45/46" in last and "done: time budget" in last and "ETA" not in last, last
    assert last.startswith("epoch 20/20 ")  # the epochs the budget bought, not the display's guess of 23
    stopped = {**summary, "stop_message": "fasttrain: stopped by SIGTERM", "resume_command": "fasttrain train ..."}
    last = _progress_lines(_run_frames(plan, 45, stopped), "20/20")[-1]
    assert "stopped" in last and "done" not in last and "ETA" not in last, last
