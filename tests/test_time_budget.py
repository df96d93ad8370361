"""A run defined over a wall-clock budget: the arithmetic on recorded step times (pure), the flags, and a short
real budgeted run through the CLI (its timing against the budget is a benchmark, benchmarks/time_budget.py)."""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from loop_helpers import Clock

from fasttrain.core.errors import UserError
from fasttrain.profiles.schema import Profile
from fasttrain.train.loop.budget import END_MARGIN_S, BudgetPace, TimeBudget, steps_that_fit
from fasttrain.train.setup.budget_args import budget_seconds, cost_seconds, deadline_seconds, parse_duration


# -- the flags -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, seconds", [("90s", 90), ("15m", 900), ("15min", 900), ("2h", 7200),
                                           ("1h30m", 5400), ("1.5h", 5400), (" 2 h ", 7200), ("45sec", 45)])
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@given(st.text(max_size=12))
@settings(max_examples=300, deadline=None)
def test_any_text_is_a_duration_or_one_clear_error(text: str) -> None:
    try:
        assert 0 < parse_duration(text) <= 30 * 86400
    except UserError as exc:
        assert exc.problems[0].where == "--time-budget" and len(exc.problems) == 1


def test_a_deadline_is_today_or_tomorrow() -> None:
    now = datetime(2026, 11, 25, 22, 0)
    assert deadline_seconds("23:30", now) == 5400
    assert deadline_seconds("21:00", now) == 23 * 3600  # already past: tomorrow
    for bad in ("24:00", "7pm", "", "23:5"):
        with pytest.raises(UserError):
            deadline_seconds(bad, now)


def test_a_money_budget_is_time_at_the_profiles_price() -> None:
    profile = Profile.model_validate({"hardware": {"price_on_demand_per_hour": 1.2}})
    assert cost_seconds(0.6, profile) == pytest.approx(1800)
    with pytest.raises(UserError, match="no hourly price"):
        cost_seconds(1.0, Profile())
    with pytest.raises(UserError, match="only one budget"):
        budget_seconds(60.0, "23:00", None, profile, datetime(2026, 11, 25, 20, 0))


# -- the arithmetic, on recorded step times ------------------------------------------------------------------
def test_steps_that_fit_spread_the_epoch_overhead() -> None:
    assert steps_that_fit(60.0, 0.5) == 120
    assert steps_that_fit(60.0, 0.5, overhead_per_step_s=0.1) == 100
    assert steps_that_fit(-1.0, 0.5) == 0



class Schedule:
    def __init__(self) -> None:
        self.step, self.total = 0, 1000

    @property
    def total_steps(self) -> int:
        return self.total

    def replan(self, total_steps: int, *, measured: bool = True) -> None:
        self.total = total_steps


def test_the_plan_follows_the_measured_steps_and_ends_inside_the_budget() -> None:
    """A 100 s budget, 10 s of start-up, 2 s reserved for the end: the forecast said 0.1 s a step, the machine
    does 0.2 s (recorded), and each 50-step epoch's validation takes 1 s."""
    wall = Clock(1000.0)
    budget = TimeBudget(100.0, launched_at=1000.0, clock=wall)
    schedule = Schedule()
    pace = BudgetPace(budget, schedule, steps_per_epoch=50, first_step_s=0.1, clock=wall)
    wall.now += 10.0
    pace.start(end_s=2.0)
    assert schedule.total == int((100 - 10 - 2 - END_MARGIN_S) / 0.1)  # the forecast's plan
    steps = 0
    while True:
        steps += 1
        schedule.step = steps
        wall.now += 0.2
        if pace.after_step(steps):
            break
        if steps % 50 == 0:
            wall.now += 1.0  # validation
            if pace.after_epoch(train_s=10.0, steps=50, overhead_s=1.0, end_s=2.0):
                break
    assert budget.replans >= 2 and schedule.total - budget.planned_steps in (0, 1)  # the end: the step just taken
    left = budget.deadline - wall.now
    assert 2.0 <= left <= 2.0 + END_MARGIN_S + 1.5, left  # the end fits, and little of the budget is wasted


def test_a_slower_machine_stops_on_the_clock_whatever_the_plan() -> None:
    wall = Clock(0.0)
    budget = TimeBudget(50.0, launched_at=0.0, clock=wall)
    budget.replan(0, 0.01, 0.0)  # a plan for a fast machine
    wall.now = 50.0 - END_MARGIN_S
    assert budget.out_of_time(10)
    assert budget.report()["margin_s"] == pytest.approx(END_MARGIN_S)


def test_a_resumed_run_continues_with_what_is_left() -> None:
    wall = Clock(500.0)
    budget = TimeBudget(90.0, launched_at=500.0, used_before_s=60.0, clock=wall)
    assert budget.deadline == 530.0 and budget.used_s() == 60.0


# -- a real budgeted run ------------------------------------------------------------------------------------
def test_a_short_budgeted_run_ends_its_schedule_and_says_what_it_used(cli, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from loop_helpers import TINY_PROFILE, write_image_folder
    monkeypatch.chdir(tmp_path)
    # In-process, "when the process started" is when pytest did, maybe minutes ago: the command starts now.
    monkeypatch.setattr("fasttrain.train.run.start_time.process_started_at", lambda pid=None: time.time())
    write_image_folder(tmp_path / "data", train_per_class=16)
    (tmp_path / "tiny.yaml").write_text(TINY_PROFILE.replace("epochs: 2", "epochs: 1000"))
    res = cli("train", "--profile", "tiny.yaml", "--data", "data", "--model", "tiny_cnn", "--time-budget", "25s",
              "--run-name", "b", "--json", "--no-tune")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    budget = summary["time_budget"]
    assert budget["budget_s"] == 25 and budget["source"] == "--time-budget" and budget["replans"] >= 1
    assert 1 <= summary["epochs_run"] < 1000  # the budget ended the run, not optim.epochs
    assert budget["lr_end_share"] <= 0.02  # the LR reached its floor
    assert budget["used_s"] == pytest.approx(25 - budget["margin_s"])
    history = summary["history"]
    assert all(r["elapsed_s"] > 0 for r in history) and history[-1]["elapsed_s"] < budget["used_s"]
    from fasttrain.train.state import checkpoint as ck
    saved = ck.load(tmp_path / "runs" / "b" / "last.pt")
    assert saved["budget_used_s"] > 0 and saved["args"]["time_budget"] == 25


def test_epochs_given_with_a_budget_cap_it_and_the_lr_still_ends_at_its_floor(
        cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loop_helpers import TINY_PROFILE, write_image_folder

    monkeypatch.chdir(tmp_path)
    write_image_folder(tmp_path / "data")
    (tmp_path / "tiny.yaml").write_text(TINY_PROFILE)
    res = cli(
        "train",
        "--profile",
        "tiny.yaml",
        "--data",
        "data",
        "--model",
        "tiny_cnn",
        "--time-budget",
        "1h",
        "--epochs",
        "2",
        "--run-name",
        "c",
        "--json",
        "--no-tune",
    )
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["epochs_run"] == 2 and summary["time_budget"]["lr_end_share"] <= 0.02
    assert summary["time_budget"]["margin_s"] > 60  # the cap, not the clock, ended it


def test_doctor_in_a_kaggle_notebook_names_the_session_limit_and_the_flag(cli, tmp_path: Path) -> None:
    report = json.loads((Path(__file__).parent / "fixtures" / "reports" / "cpu_only.json").read_text())
    report["env"] = {**report.get("env", {}), "KAGGLE_KERNEL_RUN_TYPE": "Interactive"}
    recorded = tmp_path / "kaggle.json"
    recorded.write_text(json.dumps(report))
    res = cli("doctor", "--report-from", str(recorded), "--json")
    found = {f["id"]: f for f in json.loads(res.out)["findings"]}
    assert found["session"]["status"] == "warn" and "12 h" in found["session"]["title"]
    assert "--time-budget 11h30m" in found["session"]["fix"] and "30 h" in found["session"]["detail"]
    plain = json.loads((Path(__file__).parent / "fixtures" / "reports" / "cpu_only.json").read_text())
    recorded.write_text(json.dumps(plain))
    assert "session" not in {
        f["id"] for f in json.loads(cli("doctor", "--report-from", str(recorded), "--json").out)["findings"]
    }


def test_estimate_says_what_a_budget_buys(cli) -> None:
    res = cli("estimate", "--profile", "kaggle-t4", "--model", "resnet50", "--time-budget", "11h30m", "--json")
    assert res.code == 0, res.err
    buys = json.loads(res.out)["time_budget"]
    forecast = json.loads(res.out)["forecast"]
    assert buys["budget_s"] == 11.5 * 3600 and buys["epochs"] == pytest.approx(buys["budget_s"] / buys["epoch_s"])
    assert buys["images"] == int(
        buys["epochs"]
        * forecast["schedule"]["iterations_per_epoch"]
        * forecast["schedule"]["batch_size"]
        * forecast["schedule"]["world_size"]
    )
    assert cli("estimate", "--model", "resnet18", "--time-budget", "soon").code == 2


# -- when the process started: the clock of time to accuracy and of a budget ---------------------------------------
def test_process_age_reads_the_boot_clock_and_refuses_what_does_not_parse() -> None:
    from fasttrain.train.run.start_time import process_age_s

    rest = " ".join(["0"] * 18)  # fields 3..21 (state, ppid, ..., nice, threads, itrealvalue)
    stat = f"4242 (odd ) name) S {rest} 150000 0 0\n"  # a name with a space and a ')': field 22 after the last ')'
    assert process_age_s(stat, "1502.25 3000.00\n", 100) == pytest.approx(2.25)
    assert process_age_s(stat, "1400.00 1.00\n", 100) is None  # started after "now": the files disagree
    assert process_age_s("garbage", "1502.25 3000.00\n", 100) is None
    assert process_age_s(stat, "", 100) is None


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="Linux /proc only (elsewhere psutil's create_time)")
def test_the_process_start_is_the_launch_a_parent_sees() -> None:
    """psutil's create_time adds a boot time given in whole seconds (0.76 s early on this project's VM): a budget
    and a time to accuracy counted from it were that much too long."""
    import subprocess
    import sys
    import time

    code = "from fasttrain.train.run.start_time import process_started_at; print(repr(process_started_at()))"
    for _ in range(2):
        before = time.time()
        started = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
        assert before - 0.05 <= started <= before + 0.5, started - before
