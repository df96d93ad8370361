"""Image transforms from the profile's `augment:` section, and mixup/cutmix from `optim:`.

Geometric and colour steps run on the decoded PIL image (cheap at small sizes), then one conversion to a
float tensor, normalisation and random erasing. All randomness comes from torch's generator, which the
image dataset seeds per sample (see datasets.ImageFiles), so augmentation does not depend on worker count.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from fasttrain.profiles.schema import AugmentSpec, OptimSpec

if TYPE_CHECKING:
    from torchvision.transforms.v2 import Compose

In = TypeVar("In")    # what a dataset reads: a PIL image, uint8 pixels, any sample
Out = TypeVar("Out")  # what the transform makes of it

# ImageNet statistics: the convention timm and torchvision models are built around.
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
# A run's normalisation, (mean, std) per RGB channel: ImageNet's, or the pretrained weights' own (a ViT's 0.5s).
Norm = tuple[tuple[float, ...], tuple[float, ...]]
IMAGENET: Norm = (MEAN, STD)
# Validation resizes to image_size / CROP_PCT then centre-crops image_size (timm's default 0.875).
CROP_PCT = 0.875


def train_transform(augment: AugmentSpec, image_size: int, norm: Norm = IMAGENET) -> Compose:
    from torchvision.transforms import v2

    steps: list[Any] = [v2.RandomResizedCrop(image_size, scale=tuple(augment.random_resized_crop_scale),
                                             antialias=True)]
    if augment.hflip > 0:
        steps.append(v2.RandomHorizontalFlip(augment.hflip))
    if augment.rotation_degrees > 0 or augment.translate > 0:
        translate = (augment.translate, augment.translate) if augment.translate > 0 else None
        steps.append(v2.RandomAffine(degrees=augment.rotation_degrees, translate=translate))
    if augment.color_jitter > 0:
        j = augment.color_jitter
        steps.append(v2.ColorJitter(brightness=j, contrast=j, saturation=j))
    steps += _to_normalised_tensor(norm)
    if augment.random_erasing > 0:
        steps.append(v2.RandomErasing(p=augment.random_erasing))
    return v2.Compose(steps)


def resize_side(image_size: int, crop_pct: float = CROP_PCT) -> int:
    """The short side validation resizes to before its centre crop: one rule for every path that validates or
    predicts (this transform, the in-RAM boxes, datasets/inference.val_pixels), so they see the same pixels."""
    return max(image_size, round(image_size / crop_pct))


def val_transform(image_size: int, crop_pct: float = CROP_PCT, norm: Norm = IMAGENET) -> Compose:
    from torchvision.transforms import v2

    resize = resize_side(image_size, crop_pct)
    return v2.Compose([v2.Resize(resize, antialias=True), v2.CenterCrop(image_size), *_to_normalised_tensor(norm)])


def transformed(transform: Callable[[In], Out] | None, item: In, sample_seed: int | None) -> In | Out:
    """`item` through `transform` (None: unchanged), with torch's generator seeded for this sample when a seed is
    given (seeded_call): what every dataset's __getitem__ does after reading its sample."""
    if transform is None:
        return item
    if sample_seed is None:
        return transform(item)
    return seeded_call(transform, item, sample_seed)


def seeded_call(transform: Callable[[In], Out], image: In, sample_seed: int) -> Out:
    """transform(image) with torch's generator seeded for this sample: augmentation is a pure function of (seed,
    epoch, index) whatever the worker count. In the main process the generator state is restored afterwards."""
    import torch
    from torch.utils.data import get_worker_info

    generator = torch.random.default_generator
    if get_worker_info() is not None:  # a worker's RNG belongs to the data pipeline alone
        generator.manual_seed(sample_seed)
        return transform(image)
    saved = generator.get_state()
    try:
        generator.manual_seed(sample_seed)
        return transform(image)
    finally:
        generator.set_state(saved)


def _to_normalised_tensor(norm: Norm) -> list[Any]:
    import torch
    from torchvision.transforms import v2

    return [v2.PILToTensor(), v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(norm[0]), list(norm[1]))]


class MixupCutmix:
    """timm's Mixup with label smoothing, tolerant of odd batch sizes.

    timm mixes a batch with its flipped self and refuses odd lengths; a batch shortened by a skipped
    corrupt file or a final partial batch can be odd, so the last sample is passed through with
    smoothed one-hot targets instead.
    """

    def __init__(self, optim: OptimSpec, num_classes: int):
        from timm.data import Mixup

        self.num_classes = num_classes
        self.smoothing = optim.label_smoothing
        self._mixup = Mixup(mixup_alpha=optim.mixup_alpha, cutmix_alpha=optim.cutmix_alpha,
                            label_smoothing=optim.label_smoothing, num_classes=num_classes)

    def __call__(self, images: Any, targets: Any) -> tuple[Any, Any]:
        import torch
        from timm.data.mixup import mixup_target

        n = len(images)
        if n % 2 == 0:
            return self._mixup(images, targets)
        if n == 1:
            return images, mixup_target(targets, self.num_classes, 1.0, self.smoothing)
        head_x, head_y = self._mixup(images[:-1].clone(), targets[:-1])
        tail_y = mixup_target(targets[-1:], self.num_classes, 1.0, self.smoothing)
        return torch.cat([head_x, images[-1:]]), torch.cat([head_y, tail_y.to(head_y.dtype)])


def make_mixup(optim: OptimSpec, num_classes: int) -> MixupCutmix | None:
    """A callable (images, int targets) -> (mixed images, soft targets), or None when both alphas are 0.

    With it the loss must take soft targets (timm's SoftTargetCrossEntropy, or F.cross_entropy on
    probabilities); label smoothing is then already inside the targets.
    """
    if optim.mixup_alpha <= 0 and optim.cutmix_alpha <= 0:
        return None
    return MixupCutmix(optim, num_classes)
