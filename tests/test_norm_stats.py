"""train/loop/norm_stats.py: batch-norm statistics re-estimated with the current weights before validation."""
from __future__ import annotations

import copy

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from loop_helpers import cpu_plan, make_trainer

from fasttrain.train.loop.norm_stats import RecentBatches, recalibrate, training_norms


def _batch(size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(size, 3, 6, 6, generator=g) * 2 + 1, torch.randint(0, 3, (size,), generator=g)


def _bn_net(seed: int = 0) -> torch.nn.Module:
    """conv -> BN -> dropout -> conv -> BN -> head: two BN layers, one dropout that must stay off while measuring."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Dropout(0.9),
        torch.nn.Conv2d(4, 5, 3, padding=1), torch.nn.BatchNorm2d(5), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(5, 3))


def _expected_first_bn(model: torch.nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """The first BN layer's statistics by hand: the per-channel mean of each batch's mean and of each batch's
    unbiased variance of the first convolution's output (batches of equal size)."""
    with torch.no_grad():
        outs = [model[0](x) for x, _ in batches]
    means = torch.stack([o.mean(dim=(0, 2, 3)) for o in outs]).mean(0)
    variances = torch.stack([o.transpose(0, 1).reshape(o.shape[1], -1).var(dim=1, unbiased=True) for o in outs])
    return means, variances.mean(0)


def _identity(images: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return images, targets


@settings(max_examples=60, deadline=None)
@given(images=st.integers(0, 300), sizes=st.lists(st.integers(1, 70), min_size=0, max_size=30))
def test_recent_batches_hold_the_newest_images_and_no_more_than_needed(images: int, sizes: list[int]) -> None:
    recent = RecentBatches(images)
    for i, size in enumerate(sizes):
        recent.add((torch.zeros(size, 1), torch.full((size,), i)))
    held = list(recent)
    assert recent.count == sum(len(b[1]) for b in held) and len(recent) == len(held)
    if images == 0 or not sizes:
        assert not held
        return
    # The newest batches, in order, ending with the last one added.
    assert [int(b[1][0]) for b in held] == list(range(len(sizes) - len(held), len(sizes)))
    assert recent.count >= min(images, sum(sizes))        # enough images whenever that many were added
    assert len(held) == 1 or recent.count - len(held[0][1]) < images  # the oldest is needed to reach `images`


def test_recent_batches_take_dict_batches() -> None:
    recent = RecentBatches(8)
    for _ in range(5):
        recent.add({"images": torch.zeros(4, 3, 2, 2), "targets": torch.zeros(4, dtype=torch.long)})
    assert len(recent) == 2 and recent.count == 8


def test_recalibrate_gives_the_statistics_of_the_current_weights() -> None:
    model = _bn_net()
    batches = [_batch(16, seed) for seed in range(3)]
    model.train()
    with torch.no_grad():  # stale statistics: those of other inputs
        for seed in range(5):
            model(_batch(16, 100 + seed)[0] * 5 - 3)
    names = training_norms(model)
    assert names == ["1", "5"]
    momenta = [m.momentum for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    recent = RecentBatches(48)
    for b in batches:
        recent.add(b)
    seconds = recalibrate(model, names, recent, _identity, torch.no_grad)
    mean, var = _expected_first_bn(model, batches)
    assert seconds > 0
    torch.testing.assert_close(model[1].running_mean, mean, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(model[1].running_var, var, rtol=1e-4, atol=1e-5)
    # Everything as it was: every module still training, each momentum back.
    assert all(m.training for m in model.modules())
    assert [m.momentum for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)] == momenta


def test_dropout_stays_off_while_measuring() -> None:
    """The second BN layer sees the first's output through a dropout of 0.9: in training mode that would scale
    its statistics by ~10x; measured in evaluation mode, they are those of the model as validated."""
    model = _bn_net()
    batches = [_batch(16, seed) for seed in range(2)]
    recent = RecentBatches(32)
    for b in batches:
        recent.add(b)
    model.train()
    recalibrate(model, training_norms(model), recent, _identity, torch.no_grad)
    probe = copy.deepcopy(model).eval()
    probe[1].train()  # while measuring, the first layer normalises with each batch's own statistics
    with torch.no_grad():
        feats = [probe[:5](x) for x, _ in batches]  # through the dropout, in evaluation mode
    expected = torch.stack([f.mean(dim=(0, 2, 3)) for f in feats]).mean(0)
    torch.testing.assert_close(model[5].running_mean, expected, rtol=1e-4, atol=1e-5)


def test_frozen_layers_stay_frozen_and_a_copy_is_matched_by_name() -> None:
    trained = _bn_net()
    trained.train()
    trained[5].eval()  # the user froze this one
    assert training_norms(trained) == ["1"]
    average = copy.deepcopy(trained).eval()  # like timm's ModelEmaV3: a copy kept in evaluation mode
    frozen_before = average[5].running_mean.clone()
    recent = RecentBatches(16)
    recent.add(_batch(16))
    recalibrate(average, training_norms(trained), recent, _identity, torch.no_grad)
    assert not average.training and not average[1].training  # modes as before
    torch.testing.assert_close(average[1].running_mean, _expected_first_bn(average, [_batch(16)])[0],
                               rtol=1e-4, atol=1e-5)
    assert torch.equal(average[5].running_mean, frozen_before)


def test_nothing_to_do_without_batches_or_batch_norm() -> None:
    model = _bn_net()
    before = copy.deepcopy(model.state_dict())
    assert recalibrate(model, training_norms(model), RecentBatches(64), _identity, torch.no_grad) == 0.0
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    no_norms = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))
    recent = RecentBatches(4)
    recent.add((torch.zeros(4, 4), torch.zeros(4, dtype=torch.long)))
    assert training_norms(no_norms) == [] and recalibrate(no_norms, [], recent, _identity, torch.no_grad) == 0.0


def _fit(images: int, ema: float | None) -> tuple[torch.nn.Module, list[tuple[torch.Tensor, torch.Tensor]]]:
    plan, profile = cpu_plan(loader={"batch_size": 16, "num_workers": 0, "image_size": 6},
                             optim={"optimizer": "adamw", "base_lr": 0.05, "base_batch": 16, "epochs": 1,
                                    "ema_decay": ema},
                             speed={"precision": "fp32", "channels_last": False, "compile": False})
    train = [_batch(16, seed) for seed in range(6)]
    trainer = make_trainer(plan, profile.optim, _bn_net(), batches=len(train), precise_bn_images=images)
    trainer.fit(train, [_batch(16, 50)], epochs=1)
    return trainer.engine.evaluated or trainer.model, train


def test_the_loop_validates_with_statistics_of_its_last_batches() -> None:
    """A real Trainer at a high LR: with precise_bn_images 32 the validated weights carry the statistics of the
    epoch's last two batches under the final weights; with 0, the lagging running averages."""
    model, train = _fit(32, ema=None)
    mean, _ = _expected_first_bn(model.eval(), train[-2:])
    torch.testing.assert_close(model[1].running_mean, mean, rtol=1e-4, atol=1e-5)
    stale, _ = _fit(0, ema=None)
    assert not torch.allclose(stale[1].running_mean, mean, rtol=1e-3, atol=1e-4)


def test_the_moving_average_is_what_gets_recalibrated() -> None:
    average, train = _fit(32, ema=0.9)
    mean, _ = _expected_first_bn(average, train[-2:])
    torch.testing.assert_close(average[1].running_mean, mean, rtol=1e-4, atol=1e-5)


# -- issue 39 item 8: no host read of the batch count per layer per batch ------------------------------------
class _CountedReads(torch.Tensor):
    """A batch-norm layer's num_batches_tracked that counts `float()` of itself: the read torch's (and timm's)
    batch norm makes on every forward when momentum is None (a device-to-host sync per layer per batch on CUDA)."""

    reads = 0

    def __float__(self) -> float:
        type(self).reads += 1
        return super().__float__()


def _resnet18() -> torch.nn.Module:
    from fasttrain.models.registry import create_model
    torch.manual_seed(0)
    return create_model("resnet18", num_classes=3)


def _images(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 3, 32, 32, generator=g) * 1.5 + 0.5, torch.zeros(n, dtype=torch.long)


def test_the_reestimate_reads_no_batch_count_on_the_host() -> None:
    """Each layer is given its momentum per batch (1, 1/2, 1/3, ...): the cumulative average without torch's
    `float(num_batches_tracked)` on every forward (53 syncs a batch for ResNet-50 on a GPU)."""
    model = _resnet18().train()
    names = training_norms(model)
    layers = [model.get_submodule(name) for name in names]
    for m in layers:
        m.num_batches_tracked = torch.Tensor._make_subclass(_CountedReads, m.num_batches_tracked)
    seen: list[float | None] = []
    layers[0].register_forward_pre_hook(lambda m, args: seen.append(m.momentum))
    recent = RecentBatches(24)
    for seed in range(3):
        recent.add(_images(8, seed))
    _CountedReads.reads = 0
    recalibrate(model, names, recent, _identity, torch.no_grad)
    assert _CountedReads.reads == 0, f"{_CountedReads.reads} host reads of num_batches_tracked"
    assert seen == [1.0, 1 / 2, 1 / 3]
    assert [m.momentum for m in layers] == [0.1] * len(layers)  # each layer's own momentum back
    assert all(int(m.num_batches_tracked) == 3 for m in layers)   # counted as torch counts them


def test_per_batch_momentum_gives_the_cumulative_average_on_resnet18() -> None:
    """Unequal batches on a real resnet18 at 32 px: the statistics equal torch's own cumulative average
    (momentum None) over the same batches, layer by layer."""
    model = _resnet18().train()
    names = training_norms(model)
    batches = [_images(n, seed) for seed, n in enumerate((8, 5, 8, 3))]
    reference = copy.deepcopy(model).eval()
    for name in names:
        m = reference.get_submodule(name)
        m.reset_running_stats()
        m.momentum = None
        m.train()
    with torch.no_grad():
        for images, _ in batches:
            reference(images)
    recent = RecentBatches(24)
    for b in batches:
        recent.add(b)
    assert len(recent) == 4
    recalibrate(model, names, recent, _identity, torch.no_grad)
    assert len(names) == 20
    for name in names:
        ours, theirs = model.get_submodule(name), reference.get_submodule(name)
        torch.testing.assert_close(ours.running_mean, theirs.running_mean, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(ours.running_var, theirs.running_var, rtol=1e-5, atol=1e-6)
