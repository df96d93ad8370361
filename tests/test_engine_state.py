"""The step engine and its parts save and load themselves (state_dict / load_state_dict, as torch's objects do):
a real tiny batch-norm net trained a few steps with AdamW, the LR schedule, the moving average and the back-off,
saved, loaded into a fresh engine built from other weights, takes the identical next step; the checkpoint file
round-trips the same state; and a run stopped after an epoch and resumed from its file ends with the weights of
the run that was never stopped."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from loop_helpers import cpu_plan, make_trainer

from fasttrain.core.errors import UserError
from fasttrain.models.tiny import tiny_cnn
from fasttrain.train.loop.backoff import OomBackoff
from fasttrain.train.loop.precision import make_precision
from fasttrain.train.loop.step import StepEngine
from fasttrain.train.state import checkpoint as ck
from fasttrain.train.state.run_state import ENGINE_ENTRIES, Resume, RunState

STEPS = 8
BATCHES = [(torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(i)),
            torch.arange(4) % 3) for i in range(STEPS)]


def _engine(seed: int, **optim: object) -> StepEngine:
    plan, profile = cpu_plan(speed={"precision": "fp32", "compile": False, "channels_last": False},
                             optim={"optimizer": "adamw", "ema_decay": 0.8, "warmup_epochs": 0.5, **optim})
    torch.manual_seed(seed)
    return StepEngine.build(plan, profile.optim, tiny_cnn(3, width=8), batches_per_epoch=STEPS)


def _same(ours: object, theirs: object, where: str = "") -> None:
    """Nested state dicts equal: tensors bit for bit, everything else by ==."""
    if torch.is_tensor(ours):
        assert torch.is_tensor(theirs) and torch.equal(ours, theirs), where
    elif isinstance(ours, dict):
        assert isinstance(theirs, dict) and list(ours) == list(theirs), where
        for key in ours:
            _same(ours[key], theirs[key], f"{where}.{key}")
    elif isinstance(ours, (list, tuple)):
        assert isinstance(theirs, (list, tuple)) and len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            _same(a, b, f"{where}[{i}]")
    else:
        assert ours == theirs, (where, ours, theirs)


def _steps(engine: StepEngine, indices: range) -> list[float]:
    engine.train_mode(True)
    return [float(engine.step(BATCHES[i], i, STEPS, epoch=0, measure=False).loss) for i in indices]


def test_the_engine_state_loads_into_a_fresh_engine_which_takes_the_identical_next_step() -> None:
    trained, fresh = _engine(seed=0), _engine(seed=1)
    _steps(trained, range(5))
    # a copy, as a file holds it: torch's Optimizer.load_state_dict keeps the very tensors it is given
    state = copy.deepcopy(trained.state_dict())
    assert tuple(state) == ENGINE_ENTRIES  # the checkpoint file's own keys: the format does not change
    assert not torch.equal(fresh.module.state_dict()["0.0.weight"], state["model"]["0.0.weight"])
    fresh.load_state_dict(state)
    _same(fresh.state_dict(), state, "state")
    # each part on its own, too: the weights, AdamW's moments, the schedule, the average, the back-off
    _same(fresh.optimizer.state_dict(), trained.optimizer.state_dict(), "optimizer")
    _same(fresh.schedule.state_dict(), trained.schedule.state_dict(), "schedule")
    assert fresh.ema is not None and trained.ema is not None
    _same(fresh.ema.state_dict(), trained.ema.state_dict(), "ema")
    assert fresh.schedule.step == 5 and fresh.schedule.current() == trained.schedule.current()
    # the next steps are the same steps: losses, weights, moments and average bit for bit
    assert _steps(fresh, range(5, STEPS)) == _steps(trained, range(5, STEPS))
    _same(fresh.state_dict(), trained.state_dict(), "after")


def test_the_back_off_and_the_precision_round_trip() -> None:
    warned: list[str] = []
    backoff = OomBackoff(8, warned.append)
    backoff.halve(8, 1, _engine(seed=0).schedule, (0, 3), "CUDA out of memory (a test's)")
    again = OomBackoff(8, warned.append)
    again.load_state_dict(backoff.state_dict())
    assert again.splits == backoff.splits == 2 and again.events == backoff.events and len(warned) == 1
    again.load_state_dict({})  # a checkpoint of a run that never split
    assert again.splits == 1 and again.events == []

    scaled = make_precision("fp16-mixed", "cpu", init_scale=1024.0)
    assert scaled.scaler is not None
    scaled.scaler.scale(torch.ones(()))  # the scaler's first use makes its scale
    scaled.scaler.update(512.0)          # a scale the run moved to
    other = make_precision("fp16-mixed", "cpu")
    other.load_state_dict(scaled.state_dict())
    assert other.scale == 512.0 and other.state_dict() == scaled.state_dict()
    assert make_precision("fp32", "cpu").state_dict() is None  # the guard keeps nothing worth saving


def test_the_checkpoint_file_round_trips_the_engine_state(tmp_path: Path) -> None:
    plan, profile = cpu_plan(speed={"precision": "fp32", "compile": False, "channels_last": False},
                             optim={"optimizer": "adamw", "ema_decay": 0.8})
    trainer = make_trainer(plan, profile.optim, tiny_cnn(3, width=8), batches=STEPS)
    _steps(trainer.engine, range(3))
    path = ck.save_atomic(trainer.snapshot(1).to_payload(), tmp_path / "last.pt")
    state = RunState.from_payload(ck.load(path, complete=True))
    _same(state.engine_state(), trainer.engine.state_dict(), "file")

    torch.manual_seed(5)
    resumed = make_trainer(plan, profile.optim, tiny_cnn(3, width=8), batches=STEPS)
    resumed.restore(Resume(path, state))
    _same(resumed.engine.state_dict(), trainer.engine.state_dict(), "restored")
    assert resumed.last_good == path

    wider = make_trainer(plan, profile.optim, tiny_cnn(3, width=16), batches=STEPS)
    with pytest.raises(UserError, match="does not fit this model") as refused:
        wider.restore(Resume(path, state))
    assert str(path) in str(refused.value)


def test_a_run_resumed_from_its_file_ends_as_the_run_never_stopped(tmp_path: Path) -> None:
    plan, profile = cpu_plan(speed={"precision": "fp32", "compile": False, "channels_last": False},
                             optim={"optimizer": "adamw", "ema_decay": 0.8, "epochs": 3})
    train = BATCHES[:4]

    torch.manual_seed(0)
    whole = make_trainer(plan, profile.optim, tiny_cnn(3, width=8), batches=len(train))
    whole.fit(train, None, epochs=3)

    torch.manual_seed(0)
    first = make_trainer(plan, profile.optim, tiny_cnn(3, width=8), batches=len(train))
    first.fit(train, None, epochs=1)
    path = ck.save_atomic(first.snapshot(1).to_payload(), tmp_path / "last.pt")
    torch.manual_seed(7)  # another start: everything the rest depends on comes from the file
    rest = make_trainer(plan, profile.optim, tiny_cnn(3, width=8), batches=len(train))
    rest.restore(Resume(path, RunState.from_payload(ck.load(path, complete=True))))
    result = rest.fit(train, None, epochs=3)

    _same(rest.engine.state_dict(), whole.engine.state_dict(), "end")
    assert [row.train_loss for row in result.history] == [row.train_loss for row in whole.progress.history]
    assert len(result.history) == 3 and rest.engine.schedule.step == 3 * len(train)
