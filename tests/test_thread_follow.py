"""Compute threads follow the cores a CPU run gets (issue 42, point 3): the pure rule on recorded and generated
readings, the step hook on a real Telemetry with scripted host samples, and a real `fasttrain train` beside two
busy processes that gives a thread up, says so and records it in summary.json."""
from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st
from loop_helpers import Clock

from fasttrain.telemetry.recorder import Telemetry
from fasttrain.train.trial.thread_follow import FollowFreeCores
from fasttrain.tuning.thread_share import LOWER_AFTER, RAISE_AFTER, SETTLE_READINGS, ThreadShare, fair_threads


def test_the_fair_share_rounds_the_free_cores_half_up() -> None:
    assert fair_threads(2, 0.0, 2) == 2
    assert fair_threads(2, 0.5, 2) == 2     # half a core of background keeps both threads
    assert fair_threads(2, 0.6, 2) == 1
    assert fair_threads(2, 1.9, 2) == 1     # never fewer than one
    assert fair_threads(16, 5.2, 12) == 11
    assert fair_threads(16, 0.0, 12) == 12  # never more than the plan's
    assert fair_threads(2, -0.3, 2) == 2    # a reading below zero (rounding of /proc/stat) is none


def run_rule(readings: list[float | None], threads: int = 2, cores: int = 2) -> list[int]:
    share, seen = ThreadShare(threads=threads, ceiling=threads, cores=cores), []
    for r in readings:
        share = share.after(r)
        seen.append(share.threads)
    return seen


def test_two_runs_started_together_each_give_a_thread_up_and_take_it_back() -> None:
    """Readings of the shape a run's telemetry takes beside a second run of the same command on 2 cores (others'
    cores, smoothed, once a second; benchmarks/concurrent_runs.py's pairs lowered at 1.03 and 0.99): the other
    run starts, shares, and ends."""
    readings = [0.0, 0.9, 1.1, 1.0, 1.0, 0.9, 1.0, 1.0, 0.6, 0.3, 0.1, 0.0, 0.0, 0.0, 0.0, 0.0]
    seen = run_rule(readings)
    assert seen[:2] == [2, 2]                   # one high reading is not enough
    assert seen[2] == 1                         # the second in a row lowers
    first_back = seen.index(2, 3)
    quiet = readings[first_back - RAISE_AFTER + 1:first_back + 1]
    assert len(quiet) == RAISE_AFTER and max(quiet) <= 0.5     # four readings in a row with a core free raise
    assert seen[-1] == 2


def test_a_compile_of_a_second_is_not_a_competitor() -> None:
    assert run_rule([0.0, 1.8, 0.0, 1.8, 0.0, 0.0]) == [2] * 6


def test_unmeasured_readings_change_nothing() -> None:
    assert run_rule([None, float("nan"), None, float("inf")]) == [2] * 4


@settings(max_examples=300, deadline=None)
@given(readings=st.lists(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)), max_size=80),
       cores=st.integers(1, 256), ceiling=st.integers(1, 256))
def test_any_readings_keep_the_threads_within_bounds_and_changes_apart(readings: list[float | None], cores: int,
                                                                       ceiling: int) -> None:
    ceiling = min(ceiling, cores)
    share, last_change, threads = ThreadShare(threads=ceiling, ceiling=ceiling, cores=cores), None, ceiling
    for i, r in enumerate(readings):
        share = share.after(r)
        assert 1 <= share.threads <= ceiling
        if share.threads != threads:
            if last_change is not None:   # settled, then counted readings in a row
                assert i - last_change > SETTLE_READINGS + min(LOWER_AFTER, RAISE_AFTER) - 1
            last_change, threads = i, share.threads


class FakeHost:
    """Telemetry's host reader, scripted: others' cores as the test sets them."""

    def __init__(self) -> None:
        self.others: float | None = None

    def __call__(self) -> dict[str, object]:
        return {} if self.others is None else {"cpu_others_cores": self.others}


class NoGpu:
    reason = "no GPU"

    def read(self) -> dict[str, object]:
        return {}


def test_the_hook_sets_torch_threads_says_so_and_keeps_each_change() -> None:
    host, clock, threads, said = FakeHost(), Clock(), [2], []
    telemetry = Telemetry("cpu", host_reader=host, gpu_reader=NoGpu(), clock=clock)
    hook = FollowFreeCores(2, telemetry, said.append, get_threads=lambda: threads[-1], set_threads=threads.append,
                           clock=clock, started=0.0)
    hook(0)                                     # the first call takes the plan's threads as the ceiling
    assert telemetry.snapshot()["cpu_threads"] == 2
    host.others = 1.2
    for batch in range(1, 40):                  # 10 steps a second: a reading each 10th step
        clock.now += 0.1
        if batch % 10 == 0:
            telemetry.sample_now()
        hook(batch)
    assert threads == [2, 1], threads           # one change, once a second at most
    assert telemetry.snapshot()["cpu_threads"] == 1
    assert hook.changes[0]["threads"] == 1 and hook.changes[0]["others_cores"] == 1.2
    assert "other processes use 1.2 of the 2 cores: 1 compute thread instead of 2" in said[0]
    host.others = 0.0
    for batch in range(40, 140):
        clock.now += 0.1
        if batch % 10 == 0:
            telemetry.sample_now()
        hook(batch)
    assert threads == [2, 1, 2] and "back to 2 of 2 compute threads" in said[-1]
    assert [c["threads"] for c in hook.changes] == [1, 2]


BURN = "import time\nend = time.time() + 60\nwhile time.time() < end: pass"


def test_a_run_beside_busy_processes_gives_threads_up_and_records_it(tmp_path) -> None:
    """A real run with two compute threads on a machine where two other processes burn a core each: it drops to
    one thread within seconds, says why, and summary.json keeps the change (the ending names it too)."""
    cores = len(os.sched_getaffinity(0))
    started_by = subprocess.run(["sh", "-c", f"for i in $(seq {cores}); do {shlex.quote(sys.executable)} -c "
                                 f"{shlex.quote(BURN)} >/dev/null 2>&1 & echo $!; done"],
                                capture_output=True, text=True, timeout=30, check=True)
    pids = [int(p) for p in started_by.stdout.split()]
    try:
        env = {**os.environ, "FASTTRAIN_CACHE": str(tmp_path / "cache")}
        env.pop("OMP_NUM_THREADS", None)
        env.pop("FASTTRAIN_TEST_FIXED_THREADS", None)   # conftest fixes the threads for the other tests' runs
        proc = subprocess.run(
            [sys.executable, "-m", "fasttrain", "train", "--profile", "cpu", "--data", "synthetic", "--model",
             "tiny_cnn", "--time-budget", "20s", "--no-tune", "--set", "loader.num_workers=0", "--set",
             "optim.precise_bn_images=0", "--runs-dir", str(tmp_path / "runs"), "--run-name", "busy", "--verbose"],
            env=env, capture_output=True, text=True, timeout=300)
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "runs" / "busy" / "summary.json").read_text())
    changes, said = summary["thread_changes"], proc.stdout + proc.stderr
    assert changes and changes[0]["threads"] < cores and changes[0]["others_cores"] > 0.5, (changes, said[-1500:])
    assert "compute thread" in said and "until they finish" in said
    assert "compute threads down to" in said    # the ending's problems line
