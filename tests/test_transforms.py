"""Augmentation from the profile, the validation transform, and mixup/cutmix with label smoothing."""
from __future__ import annotations

import pytest
import torch
from PIL import Image

from fasttrain.datasets.transforms import MEAN, make_mixup, train_transform, val_transform
from fasttrain.profiles.schema import AugmentSpec, OptimSpec


def _image(size: int = 24) -> Image.Image:
    g = torch.Generator().manual_seed(0)
    return Image.fromarray(torch.randint(0, 256, (size, size, 3), generator=g, dtype=torch.uint8).numpy())


def _step_names(transform) -> list[str]:
    return [type(t).__name__ for t in transform.transforms]


def test_train_transform_follows_the_spec() -> None:
    full = AugmentSpec(random_resized_crop_scale=(0.5, 1.0), hflip=0.5, color_jitter=0.3, rotation_degrees=10,
                       translate=0.1, random_erasing=0.25)
    names = _step_names(train_transform(full, 16))
    for step in ("RandomResizedCrop", "RandomHorizontalFlip", "RandomAffine", "ColorJitter", "Normalize",
                 "RandomErasing"):
        assert step in names
    plain = _step_names(train_transform(AugmentSpec(hflip=0.0), 16))
    assert "RandomHorizontalFlip" not in plain and "ColorJitter" not in plain and "RandomErasing" not in plain
    crop = train_transform(full, 16).transforms[0]
    assert tuple(crop.scale) == (0.5, 1.0)


def test_outputs_are_normalised_float_tensors_of_the_size() -> None:
    torch.manual_seed(0)
    out = train_transform(AugmentSpec(color_jitter=0.4, random_erasing=1.0), 16)(_image())
    assert out.dtype == torch.float32 and tuple(out.shape) == (3, 16, 16)
    val = val_transform(16)(_image(40))
    assert tuple(val.shape) == (3, 16, 16)
    flat = val_transform(16)(Image.new("RGB", (20, 20), (0, 0, 0)))
    assert flat[0, 0, 0].item() == pytest.approx(-MEAN[0] / 0.229, rel=1e-4)


def test_val_transform_is_deterministic() -> None:
    image = _image(30)
    assert torch.equal(val_transform(16)(image), val_transform(16)(image))


def test_no_mixup_when_both_alphas_are_zero() -> None:
    assert make_mixup(OptimSpec(), 10) is None


@pytest.mark.parametrize("batch", [8, 7, 1])
def test_mixup_shapes_and_soft_targets(batch: int) -> None:
    mix = make_mixup(OptimSpec(mixup_alpha=0.2, cutmix_alpha=1.0, label_smoothing=0.1), 5)
    images = torch.randn(batch, 3, 16, 16)
    targets = torch.arange(batch) % 5
    mixed, soft = mix(images, targets)
    assert tuple(mixed.shape) == (batch, 3, 16, 16)
    assert tuple(soft.shape) == (batch, 5)
    assert torch.allclose(soft.sum(1), torch.ones(batch))
    assert float(soft.max()) <= 0.9 + 0.1 / 5 + 1e-6  # label smoothing is inside the targets
