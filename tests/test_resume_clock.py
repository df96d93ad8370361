"""Issue 43 item 1: time to accuracy across a resume. `train --epochs 1`, a pause, then `--resume RUN --epochs 2`:
epoch 2's `elapsed_s` counts on from epoch 1's (it restarted from 0 with the new process, so the summary said
"80% at 0:00:18" of a run that took 38 s), the milestones are on that clock, and the summary says how long the
stop was. Real runs of a tiny CNN on real PNG files, in child processes."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch
from conftest import run_subprocess
from loop_helpers import DETERMINISTIC_PROFILE, write_image_folder

from fasttrain.report.gather import gather_run
from fasttrain.train.loop.epoch_row import EpochRow
from fasttrain.train.run.run_clock import RunClock, resumed_clock
from fasttrain.train.run.summary import RunSummary
from fasttrain.train.state.run_state import FitProgress, Position, Resume, RunExtras, RunState

PAUSE_S = 3.0  # between the two commands: the stop, which the run's clock leaves out


def _train(cwd: Path, *extra: str) -> RunSummary:
    r = run_subprocess("train", "--profile", "tiny.yaml", "--data", "data", "--model", "tiny_cnn", "--run-name", "r",
                       "--no-tune", "--json", *extra, env={"OMP_NUM_THREADS": "1"}, cwd=cwd, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return RunSummary.from_json(json.loads(r.stdout))


def test_a_resumed_runs_epochs_count_on_from_the_time_before_the_stop(tmp_path: Path) -> None:
    write_image_folder(tmp_path / "data")
    (tmp_path / "tiny.yaml").write_text(DETERMINISTIC_PROFILE)
    first = _train(tmp_path, "--epochs", "1")
    time.sleep(PAUSE_S)
    second = _train(tmp_path, "--resume", "runs/r", "--epochs", "2")
    epochs = gather_run(tmp_path / "runs" / "r").epochs  # metrics.jsonl's epoch rows
    assert [r.epoch for r in epochs] == [1, 2]
    one, two = epochs[0].elapsed_s, epochs[1].elapsed_s
    assert one is not None and two is not None and second.wall_s is not None
    assert one == first.history[0].elapsed_s
    # Epoch 2 ends after epoch 1 on the run's clock, and not by the pause: that was the stop.
    assert two - one >= epochs[1].train_s  # at least epoch 2's own training (before: about 0, both from a start)
    assert two - one < second.wall_s + 5.0
    clock = second.resumed_clock
    assert clock is not None and clock.run_s is not None and clock.stopped_s is not None
    assert clock.before_s >= one and clock.stopped_s >= PAUSE_S - 0.5 and clock.run_s >= two
    # The milestones read the same cumulative clock as the rows.
    by_epoch = {r.epoch: r.elapsed_s for r in second.history}
    assert by_epoch[2] == two
    for m in second.milestones:
        assert m.epoch is not None and m.elapsed_s == by_epoch[m.epoch]
    assert first.resumed_clock is None


def _resume(extras: RunExtras, history: list[EpochRow]) -> Resume:
    state = RunState(model={}, optimizer={}, schedule={}, position=Position(10, 1, 0),
                     fit=FitProgress(history, None, None, 0), extras=extras)
    return Resume(Path("last.pt"), state)


def test_the_clock_continues_a_checkpoints_and_says_the_stop() -> None:
    clock = resumed_clock(_resume(RunExtras(clock_s=19.4, saved_at=1000.0), []), launched_at=1200.0)
    assert clock == RunClock(1200.0, 19.4, 200.0)
    assert clock.origin == 1200.0 - 19.4
    # epoch 3 "at 11.7 s" of the new process is 31.1 s of the run
    assert clock.now_s(1211.7) == pytest.approx(19.4 + 11.7)


def test_a_checkpoint_from_before_the_clock_continues_its_last_epoch_rows_time() -> None:
    old = _resume(RunExtras(), [EpochRow(epoch=1, elapsed_s=9.5), EpochRow(epoch=2, elapsed_s=19.4)])
    assert resumed_clock(old, 1200.0) == RunClock(1200.0, 19.4, None)
    assert resumed_clock(None, 1200.0).report() is None


def test_the_clock_is_in_the_checkpoint(tmp_path: Path) -> None:
    state = RunState(model={}, optimizer={}, schedule={}, position=Position(1, 1, 0),
                     extras=RunExtras(clock_s=12.5, saved_at=1234.0))
    torch.save(state.to_payload(), tmp_path / "p.pt")
    back = RunState.from_payload(torch.load(tmp_path / "p.pt", weights_only=False))
    assert (back.extras.clock_s, back.extras.saved_at) == (12.5, 1234.0)
