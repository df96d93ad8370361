"""Issue 39 item 4 on a real GPU (marker `gpu`; skipped with the reason without CUDA): a time budget's reserve for
the end of the run, timed on the sanity validation (train/loop/budget_reserve.py).

On a GPU the sanity pass's first batch carries CUDA and cuDNN start-up, `cudnn.benchmark` autotuning for the
evaluation shapes and, with compile on, the evaluation graph's compilation. Would have caught: the reserve scaled
that whole first pass to the validation set (many times a real validation: a first plan of 0 steps, the warm-up
cut to 0 for the rest of the run). The CPU tests, on recorded timings and a slow first batch:
tests/test_budget_ddp.py.
"""
from __future__ import annotations

import dataclasses

import pytest

pytestmark = pytest.mark.gpu


@pytest.mark.timeout(900)
def test_the_reserve_is_a_real_validations_time_after_autotuning_and_compile() -> None:
    import torch
    from gpu_helpers import release_cuda
    from loop_helpers import cpu_plan, make_trainer

    from fasttrain.models.registry import create_model
    from fasttrain.train.loop.budget_reserve import SanityTiming

    plan, profile = cpu_plan(speed={"precision": "fp32", "compile": False, "fused_optimizer": False})
    plan = dataclasses.replace(plan, device="cuda", compile=True, compile_mode="default", cudnn_benchmark=True)
    torch.manual_seed(0)
    trainer = make_trainer(plan, profile.optim, create_model("resnet18", num_classes=3), batches=4)
    g = torch.Generator().manual_seed(0)
    loader = [(torch.randn(32, 3, 64, 64, generator=g), torch.randint(0, 3, (32,), generator=g)) for _ in range(60)]
    try:
        timing = SanityTiming()
        sanity = trainer.validate(timing.wrap(loader), 2)  # the first validation: compile and autotuning
        reserve = timing.reserve_s(sanity, loader)
        whole = trainer.validate(loader)["val_s"]          # what a validation at an epoch's end takes
    finally:
        release_cuda()
    scaled_whole_pass = sanity["val_s"] * len(loader) / 2  # the old reserve
    assert reserve <= 3 * whole + 0.5, (reserve, whole, scaled_whole_pass)
    assert scaled_whole_pass > 3 * reserve, (reserve, whole, scaled_whole_pass)  # what the first batch carried
