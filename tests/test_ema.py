"""The weights' moving average (optim.ema_decay, train/loop/ema.py) inside the real step engine: the same numbers
as timm's ModelEmaV3 with warm-up over real training steps of a batch-norm net, no state_dict rebuilt per step,
integer buffers (num_batches_tracked) right whenever the average is read, and checkpoints read both ways (a
ModelEmaV3.state_dict() written before resumes; what is written now loads into ModelEmaV3)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from loop_helpers import cpu_plan, make_trainer
from timm.utils import ModelEmaV3

from fasttrain.models.tiny import tiny_cnn
from fasttrain.train.loop.step import StepEngine
from fasttrain.train.state import checkpoint as ck
from fasttrain.train.state.run_state import Resume, RunState

DECAY = 0.8     # reached by the warm-up (1 - (1 + n)^(-2/3)) after ~10 steps: both regimes are exercised
STEPS = 16
BATCHES = [(torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(i)),
            torch.arange(4) % 3) for i in range(STEPS)]


def _plan_optim(ema: float | None = DECAY):
    plan, profile = cpu_plan(speed={"precision": "fp32", "compile": False, "channels_last": False},
                             optim={"ema_decay": ema, "warmup_epochs": 0})
    return plan, profile.optim


def _engine(ema: float | None = DECAY, seed: int = 0) -> StepEngine:
    plan, optim = _plan_optim(ema)
    torch.manual_seed(seed)
    return StepEngine.build(plan, optim, tiny_cnn(3, width=8), batches_per_epoch=STEPS)


def _train(engine: StepEngine, reference: ModelEmaV3 | None = None, steps: int = STEPS) -> None:
    engine.train_mode(True)
    for i in range(steps):
        engine.step(BATCHES[i], i, STEPS, epoch=0, measure=False)
        if reference is not None:
            reference.update(engine.module, step=engine.schedule.step)


def _assert_same(ours: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> None:
    assert list(ours) == list(theirs)
    for key, value in ours.items():
        torch.testing.assert_close(value, theirs[key], rtol=1e-6, atol=1e-7, msg=key)


def test_average_equals_timm_model_ema_v3_over_real_steps() -> None:
    engine = _engine()
    reference = ModelEmaV3(engine.module, decay=DECAY, use_warmup=True)  # from the same weights, same moment
    _train(engine, reference)
    ours, theirs = engine.ema.state_dict(), reference.state_dict()
    _assert_same(ours, theirs)
    # not trivially equal: the average lags the weights as trained, batch-norm statistics included
    assert not torch.allclose(ours["module.0.0.weight"], engine.module.state_dict()["0.0.weight"])
    assert not torch.allclose(ours["module.0.1.running_mean"], engine.module.state_dict()["0.1.running_mean"])
    assert int(ours["module.0.1.num_batches_tracked"]) == STEPS  # the counter as trained, not averaged


def test_no_state_dict_is_built_per_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """ModelEmaV3 built the model's and the average's state_dicts on every update (1-2 ms of host time)."""
    engine = _engine()
    calls = []
    original = torch.nn.Module.state_dict

    def counted(self, *args, **kwargs):
        if "prefix" not in kwargs:  # a whole module's, not a submodule's part of it
            calls.append(type(self).__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "state_dict", counted)
    _train(engine, steps=4)
    assert calls == []


def test_integer_buffers_are_right_whenever_the_average_is_read() -> None:
    engine = _engine()
    _train(engine, steps=5)
    counter = engine.evaluated[0][1].num_batches_tracked  # the validated module, as validation reads it
    assert int(counter) == 5 == int(engine.module[0][1].num_batches_tracked)
    _train(engine, steps=3)
    assert int(engine.ema.state_dict()["module.0.1.num_batches_tracked"]) == 8  # as saved in a checkpoint


def test_the_average_is_of_the_unwrapped_module_in_evaluation_mode() -> None:
    engine = _engine()
    assert list(engine.ema.state_dict()) == ["module." + k for k in engine.module.state_dict()]
    assert not engine.evaluated.training
    _train(engine, steps=1)  # the first update copies the weights (warm-up decay 0)
    _assert_same({k.removeprefix("module."): v for k, v in engine.ema.state_dict().items()},
                 engine.module.state_dict())


def test_under_ddp_the_average_is_of_the_unwrapped_module(monkeypatch: pytest.MonkeyPatch) -> None:
    """A gloo world of one (the path a single GPU under torchrun takes): the runner is the DDP wrapper, the average
    follows the module inside it (its keys are the model's, not "module.module."), with ModelEmaV3's numbers."""
    import socket

    from fasttrain.train.parallel import ddp as distributed
    from fasttrain.train.types import WorkerWorld
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    plan, optim = _plan_optim()
    with distributed.joined(WorkerWorld(0, 0, 1, 1), "cpu") as ctx:
        torch.manual_seed(0)
        engine = StepEngine.build(plan, optim, tiny_cnn(3, width=8), batches_per_epoch=STEPS, dist=ctx)
        assert isinstance(engine.top, torch.nn.parallel.DistributedDataParallel)
        reference = ModelEmaV3(engine.module, decay=DECAY, use_warmup=True)
        _train(engine, reference, steps=6)
        _assert_same(engine.ema.state_dict(), reference.state_dict())
        assert list(engine.ema.state_dict()) == ["module." + k for k in engine.module.state_dict()]


def test_the_average_follows_buffers_a_move_replaced() -> None:
    """Module.to() replaces buffers (bench speedups parks a model on the host and back): the average follows the
    model's new ones, and its own copy may be moved too."""
    engine = _engine()
    reference = ModelEmaV3(engine.module, decay=DECAY, use_warmup=True)
    _train(engine, reference, steps=3)
    for moved in (engine.module, engine.evaluated, reference.module):
        moved.to(torch.float64).to(torch.float32)  # new buffer tensors; parameters keep their objects
    for i in range(3, 8):
        engine.step(BATCHES[i], i, STEPS, epoch=0, measure=False)
        reference.update(engine.module, step=engine.schedule.step)
    _assert_same(engine.ema.state_dict(), reference.state_dict())


def _checkpoint(tmp_path: Path, *, written_by_timm: bool) -> tuple[Resume, ModelEmaV3 | None]:
    """A real checkpoint file of a run trained 6 steps, its moving average as ModelEmaV3 kept it (a run of an earlier
    fasttrain) or as the engine keeps it now, read back as a resume reads it; -> (resume, the ModelEmaV3)."""
    plan, optim = _plan_optim()
    torch.manual_seed(0)
    trainer = make_trainer(plan, optim, tiny_cnn(3, width=8), batches=STEPS)
    timm_ema = ModelEmaV3(trainer.engine.module, decay=DECAY, use_warmup=True) if written_by_timm else None
    _train(trainer.engine, timm_ema, steps=6)
    state = trainer.snapshot(1)
    if timm_ema is not None:
        state.ema = timm_ema.state_dict()
    path = ck.save_atomic(state.to_payload(), tmp_path / "last.pt")
    return Resume(path, RunState.from_payload(ck.load(path, complete=True))), timm_ema


def test_a_checkpoint_written_by_model_ema_v3_resumes(tmp_path: Path) -> None:
    resume, timm_ema = _checkpoint(tmp_path, written_by_timm=True)
    assert timm_ema is not None
    plan, optim = _plan_optim()
    trainer = make_trainer(plan, optim, tiny_cnn(3, width=8), batches=STEPS)
    trainer.restore(resume)
    _assert_same(trainer.engine.ema.state_dict(), timm_ema.state_dict())
    # and the resumed average goes on exactly as ModelEmaV3 would have
    for i in range(6, 9):
        trainer.engine.step(BATCHES[i], i, STEPS, epoch=0, measure=False)
        timm_ema.update(trainer.engine.module, step=trainer.engine.schedule.step)
    _assert_same(trainer.engine.ema.state_dict(), timm_ema.state_dict())


def test_what_is_written_now_loads_into_model_ema_v3(tmp_path: Path) -> None:
    resume, _ = _checkpoint(tmp_path, written_by_timm=False)
    reader = ModelEmaV3(tiny_cnn(3, width=8), decay=DECAY, use_warmup=True)
    reader.load_state_dict(resume.state.ema)  # strict: the same keys and shapes
    plan, optim = _plan_optim()
    trainer = make_trainer(plan, optim, tiny_cnn(3, width=8), batches=STEPS)
    trainer.restore(resume)
    _assert_same(reader.state_dict(), trainer.engine.ema.state_dict())
    assert int(reader.state_dict()["module.0.1.num_batches_tracked"]) == 6


def test_no_average_without_ema_decay() -> None:
    engine = _engine(ema=None)
    assert engine.ema is None and engine.evaluated is None
