"""Issue 39, item 5: the Trainer handed the step engine its bound `_warn` (and its Checkpointer the same), a
Trainer <-> StepEngine reference cycle only a garbage collection frees. Until one ran, every engine stayed alive
with its weights, gradients and optimizer state: one per tuning-trial candidate, and a notebook's second
`fasttrain.train()` saw the first run's tensors on the GPU as used memory (mem_get_info) and split its batch.
The engine and the Checkpointer now hold the loop's callback weakly, so an engine is freed the moment its last
owner lets go.

The tests of release run with the collector off, and where no collection is the point with gc.collect() made a
no-op (some paths call it, e.g. the out-of-memory back-off): what dies there is freed by reference counting alone.

torch has a cycle of its own: the first optimizer a process builds imports torch._dynamo, and torch.fx's `wrap()`,
run by that import, keeps its own frame in a local, which holds every calling frame (the first engine's builder
among them) until a collection. It is imported here first, so the tests see fasttrain's references only; the
trial, a GPU run's end and the probe of free memory collect once for it (the trial and the probe tested below)."""
from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch._dynamo
from loop_helpers import cpu_plan, make_trainer, tiny_mlp

from fasttrain.train.loop.step import StepEngine


@pytest.fixture
def no_collector(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(gc, "collect", lambda *args, **kwargs: 0)
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@pytest.fixture
def built_engines(monkeypatch: pytest.MonkeyPatch) -> list[weakref.ref]:
    """A weak reference to every StepEngine built from now on."""
    refs: list[weakref.ref] = []
    real = StepEngine.build.__func__

    def build(cls: type, *args: Any, **kwargs: Any) -> StepEngine:
        engine = real(cls, *args, **kwargs)
        refs.append(weakref.ref(engine))
        return engine

    monkeypatch.setattr(StepEngine, "build", classmethod(build))
    return refs


def _batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(4, 12, generator=gen), torch.randint(0, 3, (4,), generator=gen)) for _ in range(n)]


def test_an_engine_and_its_trainer_are_freed_by_reference_counting(no_collector: None, tmp_path: Path) -> None:
    from fasttrain.train.loop.events import Collaborators
    from fasttrain.train.state.checkpoint_policy import CheckpointPolicy

    plan, profile = cpu_plan(speed={"precision": "fp32", "compile": False})
    trainer = make_trainer(plan, profile.optim, tiny_mlp(), batches=2,
                           collaborators=Collaborators(checkpoints=CheckpointPolicy(tmp_path)))
    trainer.train_epoch(_batches(2), 0)
    trainer.engine.warnings("a warning through the loop")  # the sink is used, not only set
    trainer.checkpoints.warn("a checkpoint warning")
    trainer.checkpoints.new_best(trainer.model, 1, 0.5)
    refs = [weakref.ref(x) for x in (trainer, trainer.engine, trainer.engine.optimizer, *trainer.model.parameters())]
    del trainer
    alive = [type(r()).__name__ for r in refs if r() is not None]
    assert alive == []  # were all alive until a garbage collection


def test_the_engine_still_warns_through_the_loop_that_owns_it() -> None:
    plan, profile = cpu_plan(speed={"precision": "fp32", "compile": False})
    trainer = make_trainer(plan, profile.optim, tiny_mlp(), batches=2)
    trainer.engine.warnings("out of memory at step 3 (test)")
    trainer.engine.warnings("out of memory at step 3 (test)")
    trainer.checkpoints.warn("disk full (test)")
    assert trainer.notes[-2:] == ["out of memory at step 3 (test)", "disk full (test)"]


def test_a_warning_after_the_loop_is_gone_goes_nowhere() -> None:
    plan, profile = cpu_plan(speed={"precision": "fp32", "compile": False})
    trainer = make_trainer(plan, profile.optim, tiny_mlp(), batches=2)
    engine = trainer.engine
    del trainer
    gc.collect()
    engine.warnings("nobody listens (test)")  # no error: the loop that showed warnings has ended


def test_no_candidate_engine_outlives_the_tuning_trial(no_collector: None, built_engines: list[weakref.ref],
                                                        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fasttrain.train.setup.prepare import prepare
    from fasttrain.train.trial.tune import run_trial
    from fasttrain.train.types import TrainArgs
    from fasttrain.tuning import decide

    monkeypatch.setenv("FASTTRAIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setitem(decide.HARD_CAP_S, "cpu", 60.0)
    prep = prepare(TrainArgs(profile="cpu", data="synthetic", model="tiny_cnn", image_size=16,
                             sets=["loader.batch_size=8"], dry_run=True))
    _, found = run_trial(prep, prep.plan, epochs=100_000)
    assert len(built_engines) >= 2 and len(found["candidates"]) >= 2, found
    assert [r for r in built_engines if r() is not None] == []  # each candidate's engine was alive until a gc


def test_the_trial_ends_with_no_candidate_held_by_a_cycle(built_engines: list[weakref.ref], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """What a cycle holds (torch's import-time one pins the first candidate's engine) is freed when the trial ends:
    else the run's loop freezes it, alive, for the whole run (heap.py: gc.freeze() at the start of fit)."""
    from fasttrain.train.setup.prepare import prepare
    from fasttrain.train.trial.tune import run_trial
    from fasttrain.train.types import TrainArgs

    real = StepEngine.build

    def pinned(*args: Any, **kwargs: Any) -> StepEngine:
        engine = real(*args, **kwargs)
        engine.notes.append(engine)  # a reference cycle through the engine, as the pinned frame makes
        return engine

    monkeypatch.setattr(StepEngine, "build", pinned)
    monkeypatch.setenv("FASTTRAIN_CACHE", str(tmp_path / "cache"))
    prep = prepare(TrainArgs(profile="cpu", data="synthetic", model="tiny_cnn", image_size=16,
                             sets=["loader.batch_size=8"], dry_run=True))
    was = gc.isenabled()
    gc.disable()
    try:
        run_trial(prep, prep.plan, epochs=10)
        assert built_engines and [r for r in built_engines if r() is not None] == []
    finally:
        if was:
            gc.enable()


def test_the_probe_frees_what_an_earlier_run_left_before_it_reads_free_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that already used CUDA (a notebook's second run) reads its device's free memory in-process
    (hardware/machine.py): unreachable tensors, cycles included, are freed and the allocator's cache handed back
    first, or mem_get_info counts them as used."""
    from fasttrain.hardware import machine, torch_child

    class Held:
        pass

    held = Held()
    held.me = held  # garbage only a collection frees
    alive = weakref.ref(held)
    del held
    order: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: order.append("empty_cache"))
    monkeypatch.setattr(torch_child, "collect",
                        lambda free: order.append(f"read {free}, garbage {'alive' if alive() else 'freed'}") or {})
    was = gc.isenabled()
    gc.disable()
    try:
        machine._ask_loaded_torch()
    finally:
        if was:
            gc.enable()
    assert order == ["empty_cache", "read current, garbage freed"]


def test_two_runs_in_one_process_leave_no_engine_behind(no_collector: None, built_engines: list[weakref.ref],
                                                         cli, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Two `train` commands in one process, as two `fasttrain.train()` calls in a notebook: after each, neither the
    trial's candidates nor the run's own engine is alive, so the next run's probe of free memory does not count
    them as used."""
    from loop_helpers import TINY_PROFILE, write_image_folder

    from fasttrain.tuning import decide

    monkeypatch.setenv("FASTTRAIN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(decide, "MIN_STEPS", 1)                   # a short run is worth a trial here
    monkeypatch.setattr(decide, "unaffordable", lambda *a: None)
    write_image_folder(tmp_path / "data")
    (tmp_path / "tiny.yaml").write_text(TINY_PROFILE)
    for name in ("first", "second"):
        res = cli("train", "--profile", str(tmp_path / "tiny.yaml"), "--data", str(tmp_path / "data"), "--model",
                  "tiny_cnn", "--epochs", "1", "--runs-dir", str(tmp_path / "runs"), "--run-name", name, "--quiet")
        assert res.code == 0, res.err
        assert built_engines and [r for r in built_engines if r() is not None] == [], name
