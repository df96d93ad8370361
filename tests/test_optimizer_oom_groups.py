"""Issue 39, item 11: an out-of-memory error in the optimizer step was retried by running the whole step again.
torch's optimizers step their param groups one after the other, so an error while updating group 1 (no weight
decay: biases and norms) came after group 0 (the weights) was updated, and the retry updated group 0 a second
time. Now the retry steps only the groups the failed attempt left untouched (their parameters' and optimizer
state's in-place version counters say which), the others' gradients set aside for it.

Real optimizers (SGD with Nesterov momentum, AdamW; multi-tensor and fused, fp32 and fp16's GradScaler) on a real
step engine; the allocator's error is raised the first time group 1's update is called. After the retry every
parameter must equal one step of a reference engine that never ran out of memory."""
from __future__ import annotations

from typing import Any

import pytest
import torch
from loop_helpers import cpu_plan, tiny_mlp

from fasttrain.profiles.schema import OptimSpec
from fasttrain.train.loop.precision import make_precision
from fasttrain.train.loop.step import StepEngine

OOM = "CUDA out of memory. Tried to allocate 2.00 GiB (test)"
KERNELS = {("sgd", False): ("torch.optim.sgd", "_multi_tensor_sgd"),
           ("adamw", False): ("torch.optim.adam", "_multi_tensor_adam"),
           ("adamw", True): ("torch.optim.adam", "_fused_adam")}


def _engine(optimizer: str, fused: bool, precision: str) -> StepEngine:
    plan, _ = cpu_plan(speed={"precision": "fp32", "compile": False, "fused_optimizer": fused})
    optim = OptimSpec(optimizer=optimizer, momentum=0.9, weight_decay=0.05, schedule="constant", warmup_epochs=0)
    engine = StepEngine.build(plan, optim, tiny_mlp(), batches_per_epoch=4)
    engine.precision = make_precision(precision, "cpu")  # fp16's GradScaler runs on the CPU too
    assert len(engine.optimizer.param_groups) == 2
    return engine


def _fail_group_once(monkeypatch: pytest.MonkeyPatch, engine: StepEngine, optimizer: str, fused: bool,
                     before: Any = None) -> list[str]:
    """The group update kernel raises the allocator's error the first time it is called for group 1 (after
    `before(params)`, a partial update, when given); -> the groups it was called for, in order."""
    import importlib
    module_name, name = KERNELS[(optimizer, fused)]
    module = importlib.import_module(module_name)
    real = getattr(module, name)
    group1 = {id(p) for p in engine.optimizer.param_groups[1]["params"]}
    calls: list[str] = []

    def kernel(params: list[torch.Tensor], *args: Any, **kwargs: Any) -> Any:
        if not params:  # a group whose gradients are all None: nothing to update
            return real(params, *args, **kwargs)
        group = "1" if id(params[0]) in group1 else "0"
        calls.append(group)
        if group == "1" and calls.count("1") == 1:
            if before is not None:
                before(params)
            raise torch.OutOfMemoryError(OOM)
        return real(params, *args, **kwargs)

    monkeypatch.setattr(module, name, kernel)
    return calls


def _one_step(engine: StepEngine) -> None:
    gen = torch.Generator().manual_seed(3)
    images, targets = torch.randn(8, 12, generator=gen), torch.randint(0, 3, (8,), generator=gen)
    engine.forward_backward(images, targets, 1)
    engine.optimizer_step(at=(0, 0, 8))


@pytest.mark.parametrize(("optimizer", "fused", "precision"), [
    ("sgd", False, "fp32"), ("adamw", False, "fp32"), ("adamw", False, "fp16-mixed"), ("adamw", True, "fp32"),
    ("adamw", True, "fp16-mixed")])
def test_a_retried_optimizer_step_updates_every_parameter_once(monkeypatch: pytest.MonkeyPatch, optimizer: str,
                                                                fused: bool, precision: str) -> None:
    reference = _engine(optimizer, fused, precision)
    _one_step(reference)
    engine = _engine(optimizer, fused, precision)
    calls = _fail_group_once(monkeypatch, engine, optimizer, fused)
    _one_step(engine)
    assert calls[:2] == ["0", "1"], calls  # group 0 was updated before the error came
    assert calls.count("0") == 1, calls    # and not again
    event, = engine.backoff.events
    assert event["stage"] == "optimizer step"
    expected = dict(reference.module.named_parameters())
    for name, p in engine.module.named_parameters():  # group 1 retried per parameter: the same arithmetic
        assert torch.allclose(p, expected[name], rtol=0, atol=1e-7), name
    assert engine.optimizer.state_dict()["state"].keys() == reference.optimizer.state_dict()["state"].keys()
    assert all(p.grad is None for p in engine.params)  # the set-aside gradients came back and were zeroed


def test_an_interrupted_first_adam_step_starts_the_group_state_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first AdamW step allocates each parameter's state; out of memory between its moments leaves a state
    without exp_avg_sq, which the retry must not take for a started one (it was a KeyError)."""
    reference = _engine("adamw", False, "fp32")
    _one_step(reference)
    engine = _engine("adamw", False, "fp32")
    real_init = torch.optim.Adam._init_group
    group1 = engine.optimizer.param_groups[1]
    failed: list[int] = []

    def init_group(self: torch.optim.Optimizer, group: dict, *args: Any) -> Any:
        out = real_init(self, group, *args)
        if group is group1 and not failed:
            failed.append(1)
            del self.state[group["params"][-1]]["exp_avg_sq"]  # the allocation that did not fit
            raise torch.OutOfMemoryError(OOM)
        return out

    monkeypatch.setattr(torch.optim.Adam, "_init_group", init_group)
    _one_step(engine)
    expected = dict(reference.module.named_parameters())
    assert all(torch.allclose(p, expected[n], rtol=0, atol=1e-7) for n, p in engine.module.named_parameters())


def test_a_group_the_error_cut_short_is_not_updated_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """An error inside a group's multi-tensor update, after it changed the weights (AdamW's decay comes first):
    redoing it would apply that part twice, so the group is left as the error left it (a step skipped for it, as
for non-finite gradients), and the warning says so."""
    engine = _engine("adamw", False, "fp32")
    warnings: list[str] = []
    engine.backoff.warn = warnings.append
    halved: list[torch.Tensor] = []

    def decay_then_fail(params: list[torch.Tensor]) -> None:
        torch._foreach_mul_(params, 0.5)
        halved.extend(p.detach().clone() for p in params)

    calls = _fail_group_once(monkeypatch, engine, "adamw", False, before=decay_then_fail)
    _one_step(engine)
    assert calls == ["0", "1"], calls  # neither group's update ran again
    group1 = engine.optimizer.param_groups[1]["params"]
    assert all(torch.equal(p, h) for p, h in zip(group1, halved, strict=True))
    assert "2 of 2 param groups had been updated (or begun) and are not updated again" in warnings[-1], warnings


def test_with_no_group_left_to_retry_the_precisions_step_still_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every group reached before the error (the last one cut short): nothing is stepped again, but fp16's
    GradScaler still closes its step (update), or the next step would skip its unscale and step on gradients
    65536 times too large."""
    engine = _engine("sgd", False, "fp16-mixed")
    _fail_group_once(monkeypatch, engine, "sgd", False, before=lambda params: torch._foreach_mul_(params, 1.0))
    _one_step(engine)
    before = [p.detach().clone() for p in engine.params]
    _one_step(engine)  # a plain step after the retried one
    moved = max(float((p.detach() - b).abs().max()) for p, b in zip(engine.params, before, strict=True))
    assert 0 < moved < 1.0, moved
    assert engine.precision.scale == 2.0**16  # no overflow was found, no back-off
