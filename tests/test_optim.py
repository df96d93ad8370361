"""optim.py: weight-decay groups, optimizer kinds, and the per-step LR schedule."""
from __future__ import annotations

import math

import pytest
import torch

from fasttrain.profiles.schema import OptimSpec
from fasttrain.train.loop.optim import LRSchedule, build_optimizer, lr_at, param_groups


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Flatten(),
                               torch.nn.LazyLinear(2))


def test_no_weight_decay_on_norm_and_bias() -> None:
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.Linear(4, 2))
    decay, no_decay = param_groups(net, 0.05)
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    assert {id(p) for p in decay["params"]} == {id(net[0].weight), id(net[2].weight)}
    assert {id(p) for p in no_decay["params"]} == {id(net[0].bias), id(net[1].weight), id(net[1].bias),
                                                   id(net[2].bias)}


@pytest.mark.parametrize("name,cls", [("sgd", torch.optim.SGD), ("adamw", torch.optim.AdamW),
                                      ("adam", torch.optim.Adam)])
@pytest.mark.parametrize("fused", [False, True])
def test_optimizer_kinds_and_kernels(name: str, cls: type, fused: bool) -> None:
    net = torch.nn.Linear(4, 2)
    opt = build_optimizer(net, OptimSpec(optimizer=name, weight_decay=0.01), 0.3, fused=fused)
    assert isinstance(opt, cls) and opt.param_groups[0]["lr"] == 0.3
    assert opt.defaults.get("fused") is (True if fused else None)
    assert opt.defaults.get("foreach") is (None if fused else True)
    net(torch.randn(2, 4)).sum().backward()
    opt.step()  # both kernels run on this CPU


def test_warmup_is_linear_then_cosine_reaches_zero() -> None:
    kw = {"peak_lr": 1.0, "total_steps": 110, "warmup_steps": 10, "schedule": "cosine"}
    assert lr_at(0, **kw) == pytest.approx(0.1)
    assert lr_at(9, **kw) == pytest.approx(1.0)
    assert lr_at(10, **kw) == pytest.approx(1.0)
    assert lr_at(60, **kw) == pytest.approx(0.5)
    assert lr_at(110, **kw) == pytest.approx(0.0, abs=1e-12)


def test_step_and_constant_schedules() -> None:
    kw = {"peak_lr": 0.4, "total_steps": 1000, "warmup_steps": 0, "steps_per_epoch": 10, "step_epochs": 3,
          "step_gamma": 0.5}
    assert lr_at(29, schedule="step", **kw) == pytest.approx(0.4)
    assert lr_at(30, schedule="step", **kw) == pytest.approx(0.2)
    assert lr_at(65, schedule="step", **kw) == pytest.approx(0.1)
    assert lr_at(999, schedule="constant", **kw) == pytest.approx(0.4)


def test_schedule_from_spec_sets_optimizer_lr_per_step_and_plateau_cuts() -> None:
    net = torch.nn.Linear(4, 2)
    spec = OptimSpec(schedule="plateau", plateau_patience=1, warmup_epochs=1, epochs=5)
    opt = build_optimizer(net, spec, 0.2, fused=False)
    sched = LRSchedule.from_spec(opt, spec, peak_lr=0.2, steps_per_epoch=4)
    assert (sched.total_steps, sched.warmup_steps) == (20, 4)
    assert sched.apply() == pytest.approx(0.05) and opt.param_groups[0]["lr"] == pytest.approx(0.05)
    for _ in range(4):
        sched.advance()
    assert sched.apply() == pytest.approx(0.2)
    for loss in (1.0, 1.0, 1.0):  # first sets the best; two epochs without improvement > patience 1
        sched.epoch_end(loss)
    assert sched.current() == pytest.approx(0.02)
    state = sched.state_dict()
    other = LRSchedule.from_spec(opt, spec, peak_lr=0.2, steps_per_epoch=4)
    other.load_state_dict(state)
    assert other.current() == sched.current() and other.step == 4
    sched.epoch_end(math.nan)  # a diverged validation must not count as an improvement
    assert sched.current() == pytest.approx(0.02)
