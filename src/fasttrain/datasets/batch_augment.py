"""Augmentation of a whole batch of decoded images at once: the crop/resize/flip/normalise of transforms.py as a
few tensor operations instead of a Python pipeline per image.

Images of a batch may differ in size: they sit in a zero-padded uint8 tensor (N, 3, H_max, W_max) beside their
own (height, width), and every box below lies inside its own image. The crop, resize and flip are one
`grid_sample` over per-image affine grids (bilinear at the output pixels' centres, as `F.interpolate(...,
align_corners=False)` on the crop); a batch with a crop that must shrink goes through torchvision's `roi_align`
instead, whose `sampling_ratio=0` averages ceil(crop / output) samples per output pixel there, in place of the
antialiasing the per-image path does.

Randomness: each image's draws come from a counter-based hash (splitmix64) of its own key, a mix of (seed,
epoch, index) as sampler.sample_seed mixes it, so an image's crop and flip do not depend on which batch, rank
or position it lands in, as in the per-image path. Pure functions of their inputs.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fasttrain.datasets.transforms import CROP_PCT, IMAGENET, Norm, resize_side

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import ArrayLike
    from torch import Tensor

# RandomResizedCrop's defaults: aspect ratios 3/4 .. 4/3, 10 draws before the centre-crop fallback.
RATIO = (3 / 4, 4 / 3)
ATTEMPTS = 10
# Uniform draws per image: area share and log aspect ratio per attempt, then top, left, flip.
DRAWS = 2 * ATTEMPTS + 3
_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # splitmix64's constants


def sample_keys(seed: int, epoch: int, indices: ArrayLike) -> np.ndarray:
    """Each image's key for one epoch: sampler.sample_seed(seed, epoch, 0) + index, as uint64 (numpy)."""
    import numpy as np

    from fasttrain.datasets.sampler import sample_seed

    return np.asarray(indices, dtype=np.uint64) + np.uint64(sample_seed(seed, epoch, 0))


def uniforms(keys: np.ndarray, count: int = DRAWS) -> Tensor:
    """float64 tensor (N, count) of uniforms in [0, 1): draw j of image i is splitmix64(key_i + (j + 1) * golden),
    the top 53 bits. numpy's uint64 arithmetic wraps modulo 2**64 by definition (torch's signed int64 would not)."""
    import numpy as np
    import torch

    with np.errstate(over="ignore"):
        z = keys.astype(np.uint64)[:, None] + np.arange(1, count + 1, dtype=np.uint64)[None, :] * np.uint64(_GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
        z = z ^ (z >> np.uint64(31))
    return torch.from_numpy((z >> np.uint64(11)).astype(np.float64) / float(2**53))


def random_crop_boxes(sizes: Tensor, scale: tuple[float, float], draws: Tensor,
                      ratio: tuple[float, float] = RATIO) -> Tensor:
    """torchvision's RandomResizedCrop parameters for every image at once -> float boxes (N, 4) as (x1, y1, x2, y2)
    in pixels. `sizes`: int tensor (N, 2) of (height, width); `draws`: uniforms (N, >= 2 * ATTEMPTS + 2). Same rule
    as RandomResizedCrop.make_params: up to ATTEMPTS draws of area share and log aspect ratio, the first crop that
    fits wins, else a centre crop of the image with its ratio clamped into `ratio`."""
    import torch

    height, width = sizes[:, 0:1].double(), sizes[:, 1:2].double()
    area = height * width
    share = scale[0] + (scale[1] - scale[0]) * draws[:, :ATTEMPTS]
    low, high = math.log(ratio[0]), math.log(ratio[1])
    aspect = torch.exp(low + (high - low) * draws[:, ATTEMPTS:2 * ATTEMPTS])
    w = torch.round(torch.sqrt(area * share * aspect))
    h = torch.round(torch.sqrt(area * share / aspect))
    fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
    first = fits.double().argmax(dim=1, keepdim=True)   # index of the first draw that fits (0 when none does)
    w, h = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1)
    height, width = height.squeeze(1), width.squeeze(1)
    found = fits.any(dim=1)
    fw, fh = _fallback(height, width, ratio)
    w, h = torch.where(found, w, fw), torch.where(found, h, fh)
    u_top, u_left = draws[:, 2 * ATTEMPTS], draws[:, 2 * ATTEMPTS + 1]
    top = torch.where(found, torch.floor(u_top * (height - h + 1)), torch.floor((height - h) / 2))
    left = torch.where(found, torch.floor(u_left * (width - w + 1)), torch.floor((width - w) / 2))
    return torch.stack([left, top, left + w, top + h], dim=1).float()


def _fallback(height: Tensor, width: Tensor, ratio: tuple[float, float]) -> tuple[Tensor, Tensor]:
    """RandomResizedCrop's centre crop when no draw fits: the whole image, its ratio clamped into `ratio`."""
    import torch

    in_ratio = width / height
    w = torch.where(in_ratio > ratio[1], torch.round(height * ratio[1]), width)
    h = torch.where(in_ratio < ratio[0], torch.round(width / ratio[0]), height)
    return w, h


def centre_crop_boxes(sizes: Tensor, image_size: int, crop_pct: float = CROP_PCT) -> Tensor:
    """The validation transform (resize the short side to image_size / crop_pct, centre-crop image_size) as boxes
    in each image's own pixels -> float (N, 4). Rounding as torchvision's Resize and CenterCrop round."""
    import torch

    resize = resize_side(image_size, crop_pct)
    height, width = sizes[:, 0].double(), sizes[:, 1].double()
    short, long = torch.minimum(height, width), torch.maximum(height, width)
    new_long = torch.floor(resize * long / short)
    new_h = torch.where(height <= width, torch.full_like(height, resize), new_long)
    new_w = torch.where(height <= width, new_long, torch.full_like(width, resize))
    top = torch.round((new_h - image_size) / 2)
    left = torch.round((new_w - image_size) / 2)
    sy, sx = new_h / height, new_w / width
    return torch.stack([left / sx, top / sy, (left + image_size) / sx, (top + image_size) / sy], dim=1).float()


def crop_resize(pixels: Tensor, boxes: Tensor, image_size: int, flips: Tensor | None = None) -> Tensor:
    """Cut each box out of its image, resize it to image_size x image_size and mirror the images `flips` (bool
    (N,)) marks -> float (N, 3, S, S), 0-255 scale. `pixels`: uint8 (N, 3, H, W).

    When no box is larger than the output (the crop is enlarged or kept: the usual case for small images), one
    `grid_sample` over affine grids does all of it, the flip folded into the grid (1.7x faster than roi_align at
    64 px, and the same pixels: both sample bilinearly at the output pixels' centres). A box that must shrink goes
    through `roi_align`, which averages several samples per output pixel there."""
    import torch

    if bool(((boxes[:, 2:] - boxes[:, :2]) > image_size).any()):
        from torchvision.ops import roi_align

        index = torch.arange(len(boxes), dtype=boxes.dtype).unsqueeze(1)
        out = roi_align(pixels.float(), torch.cat([index, boxes], dim=1), output_size=image_size,
                        spatial_scale=1.0, sampling_ratio=0, aligned=True)
        return flip_some(out, flips) if flips is not None else out
    import torch.nn.functional as F

    n, _, height, width = pixels.shape
    x1, y1, x2, y2 = boxes.unbind(1)
    theta = torch.zeros(n, 2, 3)
    # grid_sample's x in [-1, 1] spans the padded tensor's width; output x in [-1, 1] spans the crop.
    theta[:, 0, 0] = (x2 - x1) / width * (torch.where(flips, -1.0, 1.0) if flips is not None else 1.0)
    theta[:, 0, 2] = (x1 + x2) / width - 1
    theta[:, 1, 1] = (y2 - y1) / height
    theta[:, 1, 2] = (y1 + y2) / height - 1
    grid = F.affine_grid(theta, [n, 3, image_size, image_size], align_corners=False)
    return F.grid_sample(pixels.float(), grid, mode="bilinear", padding_mode="border", align_corners=False)


def flip_some(images: Tensor, chosen: Tensor) -> Tensor:
    """Mirror the images `chosen` (bool (N,)) marks left-right, in place."""
    if bool(chosen.any()):
        images[chosen] = images[chosen].flip(-1)
    return images


def normalise(images: Tensor, norm: Norm = IMAGENET) -> Tensor:
    """0-255 floats -> the floats transforms.py produces with the run's (mean, std) `norm`, in place."""
    import torch

    mean = torch.tensor(norm[0], dtype=images.dtype).view(1, 3, 1, 1) * 255
    inv_std = 1 / (torch.tensor(norm[1], dtype=images.dtype).view(1, 3, 1, 1) * 255)
    return images.sub_(mean).mul_(inv_std)


def train_batch(pixels: Tensor, sizes: Tensor, image_size: int, scale: tuple[float, float], hflip: float,
                keys: np.ndarray, norm: Norm = IMAGENET) -> Tensor:
    """RandomResizedCrop(image_size, scale) + RandomHorizontalFlip(hflip) + normalisation of a batch; `keys`:
    each image's sample_keys."""
    draws = uniforms(keys)
    boxes = random_crop_boxes(sizes, scale, draws)
    flips = draws[:, 2 * ATTEMPTS + 2] < hflip if hflip > 0 else None
    return normalise(crop_resize(pixels, boxes, image_size, flips), norm)


def val_batch(pixels: Tensor, sizes: Tensor, image_size: int, norm: Norm = IMAGENET) -> Tensor:
    """The validation transform of a batch: resize + centre crop + normalisation."""
    return normalise(crop_resize(pixels, centre_crop_boxes(sizes, image_size), image_size), norm)
