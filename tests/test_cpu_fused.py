"""cpu_fused.py: torch's fused Adam/AdamW/SGD steps on the CPU without copying channels_last weights.

The step must be torch's, bit for bit: same weights, same moments, same step counts, for both kinds, both weight
decay groups, over several steps; checkpoints move between it and torch's class in both directions; a state whose
layout does not match its weight (loaded from elsewhere) still steps right (the kernel copies, as torch's does).
"""
from __future__ import annotations

import io

import pytest
import torch

from fasttrain.profiles.schema import OptimSpec
from fasttrain.train.loop.cpu_fused import DenseAdam, DenseAdamW, DenseSGD, dense_views, wants_dense_step
from fasttrain.train.loop.optim import build_optimizer


def _net(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten(), torch.nn.Linear(8, 5))
    return net.to(memory_format=torch.channels_last)


def _train(net: torch.nn.Module, opt: torch.optim.Optimizer, steps: int, seed: int = 1) -> None:
    gen = torch.Generator().manual_seed(seed)
    for lr in [3e-3, 2e-3, 1e-3, 5e-4][:steps]:
        for group in opt.param_groups:
            group["lr"] = lr
        x = torch.randn(4, 3, 6, 6, generator=gen).contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, 5, (4,), generator=gen)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


@pytest.mark.parametrize("ours,theirs", [(DenseAdamW, torch.optim.AdamW), (DenseAdam, torch.optim.Adam)])
def test_bit_identical_to_torchs_fused_step(ours: type, theirs: type) -> None:
    mine, ref = _net(), _net()
    groups = lambda net: [{"params": [p for p in net.parameters() if p.ndim > 1], "weight_decay": 0.05},  # noqa: E731
                          {"params": [p for p in net.parameters() if p.ndim <= 1], "weight_decay": 0.0}]
    opt, ref_opt = ours(groups(mine), lr=1e-3, fused=True), theirs(groups(ref), lr=1e-3, fused=True)
    assert not mine[0].weight.is_contiguous()  # the case the class is for: channels_last conv weights
    _train(mine, opt, 4)
    _train(ref, ref_opt, 4)
    assert not _same(mine, _net())  # it trained
    assert _same(mine, ref)
    for p, q in zip(mine.parameters(), ref.parameters(), strict=True):
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt.state[p][key], ref_opt.state[q][key]), key
        assert opt.state[p]["exp_avg"].stride() == p.stride()  # moments keep the weight's layout


def test_checkpoints_move_both_ways_with_torchs_class() -> None:
    def saved(opt: torch.optim.Optimizer) -> dict:
        buffer = io.BytesIO()
        torch.save(opt.state_dict(), buffer)
        buffer.seek(0)
        return torch.load(buffer, weights_only=True)

    start = _net()
    _train(start, first := DenseAdamW(start.parameters(), lr=1e-3, fused=True), 2)
    ours_net, torch_net = _net(), _net()
    ours_net.load_state_dict(start.state_dict())
    torch_net.load_state_dict(start.state_dict())
    ours = DenseAdamW(ours_net.parameters(), lr=1e-3, fused=True)
    theirs = torch.optim.AdamW(torch_net.parameters(), lr=1e-3, fused=True)
    ours.load_state_dict(saved(first))
    theirs.load_state_dict(saved(first))
    _train(ours_net, ours, 2, seed=7)
    _train(torch_net, theirs, 2, seed=7)
    assert _same(ours_net, torch_net)
    back = DenseAdamW(_net().parameters(), lr=1e-3, fused=True)
    back.load_state_dict(saved(theirs))  # torch's state into ours
    assert back.state_dict()["state"][0]["step"].item() == 4


def test_a_state_laid_out_unlike_its_weight_still_steps_right() -> None:
    mine, ref = _net(), _net()
    opt = DenseAdamW(mine.parameters(), lr=1e-3, fused=True)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-3, fused=True)
    _train(mine, opt, 1)
    _train(ref, ref_opt, 1)
    conv, ref_conv = mine[0].weight, ref[0].weight
    opt.state[conv]["exp_avg"] = opt.state[conv]["exp_avg"].contiguous()  # as a state from elsewhere may be
    ref_opt.state[ref_conv]["exp_avg"] = ref_opt.state[ref_conv]["exp_avg"].contiguous()
    assert dense_views([conv, conv, opt.state[conv]["exp_avg"]])[0] is conv  # mixed layouts: handed over as is
    assert dense_views([conv, conv])[0].is_contiguous()  # alike: the contiguous view
    _train(mine, opt, 3, seed=3)
    _train(ref, ref_opt, 3, seed=3)
    assert _same(mine, ref)


def test_build_optimizer_picks_it_only_for_fused_steps_on_channels_last_weights() -> None:
    spec = OptimSpec(optimizer="adamw", weight_decay=0.05)
    assert type(build_optimizer(_net(), spec, 1e-3, fused=True)) is DenseAdamW
    assert type(build_optimizer(_net(), spec.model_copy(update={"optimizer": "adam"}), 1e-3, fused=True)) is DenseAdam
    assert type(build_optimizer(_net(), spec, 1e-3, fused=False)) is torch.optim.AdamW  # foreach: no copies
    plain = _net().to(memory_format=torch.contiguous_format)
    assert type(build_optimizer(plain, spec, 1e-3, fused=True)) is torch.optim.AdamW
    sgd = spec.model_copy(update={"optimizer": "sgd"})
    assert type(build_optimizer(_net(), sgd, 1e-3, fused=True)) is DenseSGD
    assert type(build_optimizer(_net(), sgd, 1e-3, fused=False)) is torch.optim.SGD
    assert not wants_dense_step([torch.zeros(2, 3)], fused=True)


@pytest.mark.parametrize("kwargs", [{"amsgrad": True}, {"maximize": True}])
def test_what_the_copy_free_step_does_not_cover_goes_to_torchs_own_step(kwargs: dict) -> None:
    mine, ref = _net(), _net()
    opt = DenseAdamW(mine.parameters(), lr=1e-3, fused=True, **kwargs)
    _train(mine, opt, 3)
    _train(ref, torch.optim.AdamW(ref.parameters(), lr=1e-3, fused=True, **kwargs), 3)
    assert _same(mine, ref) and not _same(mine, _net())


@pytest.mark.parametrize("momentum,nesterov,decay", [(0.9, True, 5e-4), (0.9, False, 0.0), (0.0, False, 5e-4)])
def test_sgd_bit_identical_to_torchs_fused_step(momentum: float, nesterov: bool, decay: float) -> None:
    mine, ref = _net(), _net()
    kw = {"lr": 0.05, "momentum": momentum, "nesterov": nesterov, "weight_decay": decay, "fused": True}
    opt, ref_opt = DenseSGD(mine.parameters(), **kw), torch.optim.SGD(ref.parameters(), **kw)
    _train(mine, opt, 4)
    _train(ref, ref_opt, 4)
    assert _same(mine, ref) and not _same(mine, _net())
    if momentum:
        conv, ref_conv = mine[0].weight, ref[0].weight
        assert torch.equal(opt.state[conv]["momentum_buffer"], ref_opt.state[ref_conv]["momentum_buffer"])
        assert opt.state[conv]["momentum_buffer"].stride() == conv.stride()
        back = torch.optim.SGD(_net().parameters(), **kw)
        back.load_state_dict(opt.state_dict())  # ours into torch's class: the same state
        momentum = opt.state_dict()["state"][0]["momentum_buffer"]
        assert torch.equal(back.state_dict()["state"][0]["momentum_buffer"], momentum)


@pytest.mark.parametrize(
    "ours,theirs,kw",
    [(DenseAdamW, torch.optim.AdamW, {"lr": 1e-3}), (DenseSGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.9})],
)
def test_a_grad_scaler_unscales_and_skips_as_with_torchs_class(ours: type, theirs: type, kw: dict) -> None:
    """fp16's GradScaler (and the non-finite guard's, at scale 1) hands the fused step its scale and found-inf
    flag as attributes: a scaled step matches torch's, a step with an infinite gradient changes nothing."""
    nets = {"ours": _net(), "torch": _net()}
    opts = {
        "ours": ours(nets["ours"].parameters(), fused=True, **kw),
        "torch": theirs(nets["torch"].parameters(), fused=True, **kw),
    }
    scalers = {k: torch.amp.GradScaler("cpu", init_scale=1024.0) for k in nets}
    x = torch.randn(4, 3, 6, 6, generator=torch.Generator().manual_seed(5)).contiguous(
        memory_format=torch.channels_last
    )
    y = torch.tensor([0, 1, 2, 3])
    for poison in (False, True, False):
        for key, net in nets.items():
            opts[key].zero_grad(set_to_none=True)
            scalers[key].scale(torch.nn.functional.cross_entropy(net(x), y)).backward()
            if poison:
                net[0].weight.grad[0, 0, 0, 0] = float("inf")
            before = [p.detach().clone() for p in net.parameters()]
            scalers[key].step(opts[key])
            scalers[key].update()
            if poison:  # skipped: no weight moved, the step count did not advance
                assert all(torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
        assert _same(nets["ours"], nets["torch"])
    if ours is DenseAdamW:
        assert opts["ours"].state[nets["ours"][0].weight]["step"].item() == 2
        assert opts["torch"].state[nets["torch"][0].weight]["step"].item() == 2
