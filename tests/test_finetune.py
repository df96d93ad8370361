"""The fine-tuning recipe (train/setup/finetune.py): a run from weights trains at optim.finetune_lr_scale of the
profile's LR, unless the user chose the LR; pure, on the real presets."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fasttrain.profiles import presets
from fasttrain.train.setup.finetune import fine_tune


def test_from_scratch_nothing_changes() -> None:
    resolved = presets.resolve("cpu", env={})
    same, note = fine_tune(resolved, None)
    assert same is resolved and note is None


def test_from_weights_the_lr_is_a_third_and_the_plan_says_why() -> None:
    resolved = presets.resolve("cpu", env={})
    tuned, note = fine_tune(resolved, "pre.pth")
    assert resolved.profile.optim.base_lr == pytest.approx(0.003)
    assert tuned.profile.optim.base_lr == pytest.approx(0.003 * 0.33)
    assert tuned.provenance["optim.base_lr"] == "flag fine-tuning (optim.finetune_lr_scale 0.33)"
    assert note is not None and "pre.pth" in note and "0.003 -> 0.00099" in note and "finetune_lr_scale" in note
    # everything else is the preset's
    assert tuned.profile.model_dump(exclude={"optim"}) == resolved.profile.model_dump(exclude={"optim"})
    assert tuned.profile.optim.ema_decay == resolved.profile.optim.ema_decay


def test_an_lr_the_user_set_stays() -> None:
    resolved = presets.resolve("cpu", sets=["optim.base_lr=0.01"], env={})
    tuned, note = fine_tune(resolved, "pre.pth")
    assert tuned.profile.optim.base_lr == pytest.approx(0.01)
    assert note is not None and "is yours and stays" in note


def test_scale_one_trains_at_the_presets_lr() -> None:
    resolved = presets.resolve("cpu", sets=["optim.finetune_lr_scale=1"], env={})
    tuned, note = fine_tune(resolved, "timm/resnet18.a1_in1k")
    assert tuned.profile.optim.base_lr == pytest.approx(0.003)
    assert note is not None and "from scratch" in note


@settings(max_examples=30, deadline=None)
@given(scale=st.floats(min_value=0.01, max_value=1.0), preset=st.sampled_from(["cpu", "kaggle-t4", "aws-a10g"]))
def test_the_scaled_lr_is_the_presets_times_the_scale(scale: float, preset: str) -> None:
    resolved = presets.resolve(preset, sets=[f"optim.finetune_lr_scale={scale!r}"], env={})
    tuned, _ = fine_tune(resolved, "w.pth")
    assert tuned.profile.optim.base_lr == pytest.approx(resolved.profile.optim.base_lr * scale)
    assert tuned.profile.optim.base_batch == resolved.profile.optim.base_batch
