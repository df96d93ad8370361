"""Validation's centre crop on small images: keep it, or validate on the whole image? A pure rule, read from the
sample the flip and crop checks open anyway (datasets/augment_check.py).

timm's validation resizes to image_size / 0.875 and centre-crops image_size: on ImageNet-like photographs, larger
than the trained size with the object in the middle, that shows validation objects at about the size the random
crops of training show them. On small images that a class fills (Fashion-MNIST's clothes, digits), the crop cuts
the class's own edges away instead. Measured on 30,000 Fashion-MNIST images (resnet18 at 32 px, the cpu preset,
seed 1, docs/benchmarks.md "At 30,000 images"): the same training, the same weights each epoch, validated at
0.849 / 0.869 / 0.883 / 0.893 / 0.895 over epochs 1-5 on the whole image against 0.828 / 0.852 / 0.865 / 0.876 /
0.884 with the crop. So images stored at SMALL_SIDE px or less are validated (and predicted: model.json's crop_pct)
whole.
"""
from __future__ import annotations

from collections.abc import Sequence

from fasttrain.datasets.upscale_check import stored_side

SMALL_SIDE = 64       # px, the stored images' shorter side (the sample's median) up to which the crop goes
WHOLE_IMAGE = 1.0     # val_crop_pct that resizes to image_size and crops nothing


def whole_image_note(sides: Sequence[int], asked: float) -> str | None:
    """The plan's note when validation should see the whole image (`asked`: the profile's val_crop_pct, below 1),
    else None. Pure."""
    side = stored_side(sides)
    if not side or side > SMALL_SIDE or asked >= WHOLE_IMAGE:
        return None
    return (f"augment: validation sees the whole image (val_crop_pct 1.0, not {asked:g}): the images are {side} px, "
            f"at most {SMALL_SIDE}, and a centre crop cuts the class's edges away; --set augment.val_crop_pct="
            f"{asked:g} to keep the crop")
