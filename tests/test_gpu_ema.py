"""Issue 39, items 7 and 9 on a real GPU (marker `gpu`; skipped with the reason without CUDA): the moving average
of the weights (optim.ema_decay, train/loop/ema.py) on the device.

What they would have caught:
- item 9: an update that syncs with the host or moves the average off timm's ModelEmaV3 numbers in a mixed-precision
  CUDA run (the CPU test, tests/test_ema.py, runs fp32 on the CPU only);
- item 7: a `--batch-size auto` trial that does not hold the average's copy (its peak must be larger by about the
  weights' bytes), so the search's answer would not fit an EMA run under DDP, where nothing backs off.
"""
from __future__ import annotations

import dataclasses

import pytest
from gpu_helpers import release_cuda, syncs_raise

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _release() -> None:
    release_cuda()
    yield
    release_cuda()


def _plan_optim(ema: float | None, precision: str = "bf16-mixed"):
    from loop_helpers import cpu_plan
    plan, profile = cpu_plan(loader={"batch_size": 16, "num_workers": 0, "image_size": 32},
                             speed={"precision": "fp32", "compile": False, "channels_last": False},
                             optim={"ema_decay": ema, "warmup_epochs": 0})
    return dataclasses.replace(plan, device="cuda", precision=precision), profile.optim


@pytest.mark.timeout(300)
def test_the_average_on_the_device_is_model_ema_v3s_and_never_syncs() -> None:
    """Item 9: bf16 autocast (the weights stay fp32), resnet18 with batch norm: each update is device work only,
    and after 12 steps the average equals ModelEmaV3's kept beside it."""
    import timm
    import torch
    from timm.utils import ModelEmaV3

    from fasttrain.train.loop.step import StepEngine
    plan, optim = _plan_optim(0.9)
    torch.manual_seed(0)
    engine = StepEngine.build(plan, optim, timm.create_model("resnet18", num_classes=10), batches_per_epoch=100)
    reference = ModelEmaV3(engine.module, decay=0.9, use_warmup=True)
    batch = (torch.randn(16, 3, 32, 32), torch.randint(0, 10, (16,)))
    engine.train_mode(True)
    for i in range(12):
        engine.step(batch, i, 100, epoch=0, measure=False)  # updates the average after its optimizer step
        reference.update(engine.module, step=engine.schedule.step)
        with syncs_raise():  # one more update each, this one checked: no host-device sync
            engine.ema.update(engine.schedule.step + 100)
        reference.update(engine.module, step=engine.schedule.step + 100)
    ours, theirs = engine.ema.state_dict(), reference.state_dict()
    assert list(ours) == list(theirs)
    for key, value in ours.items():
        torch.testing.assert_close(value, theirs[key], rtol=1e-5, atol=1e-6, msg=key)


@pytest.mark.timeout(300)
def test_a_batch_search_trial_holds_the_average() -> None:
    """Item 7: the same trial (resnet18, 32 px, batch 32, bf16) with the average peaks higher by about one copy of
    the weights (the cache key tells the two answers apart: tests/test_ema_memory.py)."""
    import timm

    from fasttrain.train.setup.batch_search import step_trial
    weights = sum(p.numel() for p in timm.create_model("resnet18", num_classes=10).parameters()) * 4

    def peak(ema: float | None) -> int:
        plan, optim = _plan_optim(ema)
        trial = step_trial(plan, lambda: timm.create_model("resnet18", num_classes=10), image_size=32,
                           num_classes=10, optim=optim)(32)
        assert trial.ok and trial.peak_memory_bytes is not None
        release_cuda()
        return trial.peak_memory_bytes

    grown = peak(0.999) - peak(None)
    assert 0.9 * weights <= grown <= 1.5 * weights, (grown, weights)
