"""precision.py: what each precision name builds, and that fp16/bf16 autocast steps run on the CPU."""
from __future__ import annotations

import pytest
import torch
from loop_helpers import tiny_mlp

from fasttrain.profiles.schema import OptimSpec
from fasttrain.train.loop.backoff import OomBackoff
from fasttrain.train.loop.optim import LRSchedule, build_optimizer
from fasttrain.train.loop.precision import make_precision
from fasttrain.train.loop.step import StepEngine, StepSettings


def _engine(precision_name: str) -> StepEngine:
    model = tiny_mlp()
    opt = build_optimizer(model, OptimSpec(optimizer="sgd", momentum=0.0), 0.1, fused=False)
    sched = LRSchedule(opt, 0.1, total_steps=10, warmup_steps=0, schedule="constant")
    return StepEngine(model, model, opt, sched, make_precision(precision_name, "cpu", init_scale=256.0),
                      StepSettings(clip_grad_norm=1.0), OomBackoff(8, lambda text: None))


def test_fp32_has_neither_autocast_nor_scaler() -> None:
    p = make_precision("fp32", "cpu")
    assert p.dtype is None and p.scaler is None and p.scale is None
    with p.autocast():
        assert torch.nn.Linear(4, 2)(torch.randn(3, 4)).dtype == torch.float32


@pytest.mark.parametrize("name,dtype,scaled", [("bf16-mixed", torch.bfloat16, False),
                                               ("fp16-mixed", torch.float16, True)])
def test_mixed_precision_autocasts_and_trains_on_cpu(name: str, dtype: torch.dtype, scaled: bool) -> None:
    p = make_precision(name, "cpu")
    assert p.dtype == dtype and (p.scaler is not None) == scaled
    with p.autocast():
        assert torch.nn.Linear(4, 2)(torch.randn(3, 4)).dtype == dtype
    engine = _engine(name)
    before = [t.detach().clone() for t in engine.module.parameters()]
    x, y = torch.randn(8, 12), torch.randint(0, 3, (8,))
    loss = engine.forward_backward(x, y, window=1)
    norm = engine.optimizer_step(want_norm=True)
    assert torch.isfinite(loss) and norm is not None and torch.isfinite(norm)
    moved = [not torch.equal(b, a) for b, a in zip(before, engine.module.parameters(), strict=True)]
    assert any(moved), "weights did not move"
    if scaled:
        assert engine.precision.scale == 256.0  # a finite step keeps the scale (growth needs 2000 good steps)


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="fp8"):
        make_precision("fp8", "cpu")


def test_precision_state_round_trips_the_loss_scale() -> None:
    """Checkpoints keep fp16's loss scale (the payload's "scaler"); fp32/bf16 have none to keep."""
    assert make_precision("fp32", "cpu").state_dict() is None
    first, second = make_precision("fp16-mixed", "cpu", init_scale=256.0), make_precision("fp16-mixed", "cpu")
    second.load_state_dict(first.state_dict())
    assert second.scale == 256.0
    second.load_state_dict(None)  # a checkpoint written without a scaler leaves it as it is
    assert second.scale == 256.0


def test_a_logged_step_reads_the_loss_scale_after_the_optimizer_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24, finding 16: a logged fp16 step read the loss scale (GradScaler.get_scale(), a float: a GPU sync)
    before its optimizer step, stalling the step's own work. The step now keeps it on the device and the report
    reads it with the loss, after the step. The reads are counted against the optimizer step on the CPU."""
    from fasttrain.train.loop.step_report import pending_step
    engine = _engine("fp16-mixed")
    events: list[str] = []
    real_get, real_step = torch.amp.GradScaler.get_scale, engine.optimizer.step
    monkeypatch.setattr(torch.amp.GradScaler, "get_scale", lambda self: events.append("read scale") or real_get(self))
    monkeypatch.setattr(engine.optimizer, "step", lambda *a, **k: events.append("optimizer step") or
                        real_step(*a, **k))
    out = engine.step((torch.randn(8, 12), torch.randint(0, 3, (8,))), 0, 1, epoch=0, measure=True)
    assert events == ["optimizer step"]  # was: read scale, optimizer step, read scale
    record = pending_step(out, 0, 0, 1, 0.0, world=1, read=True).record
    assert record.amp_scale == real_get(engine.precision.scaler) and record.skipped is False
