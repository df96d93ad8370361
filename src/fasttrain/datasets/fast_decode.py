"""The fast decode path: JPEG bytes -> uint8 tensor at the smallest size the crop allows -> the same augmentation.

Today's path (datasets.build.ImageFiles) decodes every file at full size with PIL and augments PIL images. Here:
1. the crop is drawn first, from the file's header alone (RandomResizedCrop's own `make_params`, so it consumes
   torch's generator exactly as the PIL path does and the seeded sample gets the same crop);
2. the JPEG is decoded by libjpeg-turbo at a reduced size when the crop is at least twice the output: PIL's
   `Image.draft` selects the DCT scaling (1/2, 1/4, 1/8), which skips most of the inverse DCT work;
   otherwise `torchvision.io.decode_jpeg` decodes the bytes at full size (libjpeg-turbo, no PIL image);
3. the crop is cut from the decoded tensor (coordinates scaled by the decode factor) and resized, and the
   remaining steps of the same v2 pipeline run on the uint8 tensor (flip, affine, colour jitter, then float,
   normalisation, erasing). When normalisation is the last step (no random erasing after it), it is left to the
   device: the batch crosses shared memory and the host-to-device copy as uint8 (4x fewer bytes, no float pass
   in the workers) and `normalise_batch` (called by the training step's `to_device`) computes the same numbers
   there, as DALI and FFCV do.
Other formats (PNG, WebP, ...) decode with PIL at full size and then follow steps 1 and 3.
"""
from __future__ import annotations

import io
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fasttrain.datasets.bundle import BadSample

if TYPE_CHECKING:
    from torch import Tensor

# PIL raises these for unreadable, truncated or hostile files; torchvision's decoder raises RuntimeError.
DECODE_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, SyntaxError, RuntimeError)


def file_errors() -> tuple[type[BaseException], ...]:
    """DECODE_ERRORS and PIL's DecompressionBombError (more pixels than PIL's limit): what reading one file raises.
    A function so PIL is imported only when images are read; typed, so `except file_errors()` type-checks (an
    `except (*DECODE_ERRORS, X)` tuple does not)."""
    from PIL import Image
    return (*DECODE_ERRORS, Image.DecompressionBombError)
# DCT scaling gives 1/2, 1/4, 1/8 of the size: below 2x there is nothing to gain.
MIN_REDUCTION = 2.0
JPEG_MAGIC = b"\xff\xd8\xff"


def is_jpeg(data: bytes) -> bool:
    return data[:3] == JPEG_MAGIC


def decode(data: bytes, reduce: float = 1.0) -> tuple[Any, float]:
    """(uint8 CxHxW RGB tensor, scale of the decoded image relative to the file's size). `reduce` >= 2 lets a
    JPEG decode at 1/2, 1/4 or 1/8 size as long as each side stays >= its full size / reduce."""
    import numpy as np
    import torch
    from PIL import Image

    if is_jpeg(data) and reduce < MIN_REDUCTION:
        from torchvision.io import ImageReadMode, decode_jpeg

        try:
            tensor = decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8), mode=ImageReadMode.RGB)
            return tensor, 1.0
        except RuntimeError:  # CMYK and other JPEGs libjpeg-turbo's RGB path refuses: PIL below
            pass
    with Image.open(io.BytesIO(data)) as img:
        width = img.size[0]
        if img.format == "JPEG" and reduce >= MIN_REDUCTION:
            img.draft("RGB", (math.ceil(img.size[0] / reduce), math.ceil(img.size[1] / reduce)))
        rgb = img.convert("RGB")
    factor = rgb.size[0] / width
    return torch.from_numpy(np.asarray(rgb).copy()).permute(2, 0, 1).contiguous(), factor


# JPEG start-of-frame markers (baseline, progressive, ...): not DHT (C4), JPG (C8) or DAC (CC).
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def header_size(data: bytes) -> tuple[int, int]:
    """(height, width) from the header, without decoding: a JPEG's frame header read directly (a few segment
    hops, several times cheaper than opening it with PIL), other formats and odd JPEGs through PIL."""
    if is_jpeg(data):
        pos, end = 2, len(data) - 9
        while pos < end and data[pos] == 0xFF:
            marker = data[pos + 1]
            if marker == 0xFF:  # fill byte
                pos += 1
                continue
            if marker in _SOF:
                return int.from_bytes(data[pos + 5:pos + 7], "big"), int.from_bytes(data[pos + 7:pos + 9], "big")
            pos += 2 + int.from_bytes(data[pos + 2:pos + 4], "big")
    from PIL import Image

    with Image.open(io.BytesIO(data)) as img:
        return img.size[1], img.size[0]


def _unchanged(image: Any) -> Any:
    return image  # a module-level function: loader workers started by spawn pickle the transform


class FastTransform:
    """Wraps one of transforms.train_transform / val_transform (a v2.Compose whose first step is
    RandomResizedCrop, or Resize then CenterCrop) and applies it to encoded bytes through `decode`."""

    def __init__(self, compose: Any, defer_normalise: bool = True):
        from torchvision.transforms import v2

        steps = list(compose.transforms)
        self.first = steps[0]
        if not isinstance(self.first, (v2.RandomResizedCrop, v2.Resize)):
            raise ValueError(f"the fast path needs RandomResizedCrop or Resize first, not {type(self.first).__name__}")
        rest = fuse_normalise([s for s in steps[1:] if not isinstance(s, v2.PILToTensor)])
        # The standard normalisation as the last step: uint8 out, normalise_batch on the device does it.
        self.deferred = bool(defer_normalise and rest and isinstance(rest[-1], ScaledNormalise) and rest[-1].standard)
        kept = rest[:-1] if self.deferred else rest
        # No step left (no flip, normalising deferred): torchvision's Compose refuses an empty list.
        self.rest = v2.Compose(kept) if kept else _unchanged

    def __call__(self, data: bytes) -> Any:
        from torchvision.transforms import v2
        from torchvision.transforms.v2 import functional as F

        size = header_size(data)
        if isinstance(self.first, v2.RandomResizedCrop):
            p = self.first.make_params([_sized(size)])  # the same draw as the PIL path
            out = min(self.first.size)
            image, f = decode(data, reduce=min(p["height"], p["width"]) / out)
            top, left = round(p["top"] * f), round(p["left"] * f)
            h = max(1, min(image.shape[1] - top, round(p["height"] * f)))
            w = max(1, min(image.shape[2] - left, round(p["width"] * f)))
            image = F.resized_crop(image, top, left, h, w, list(self.first.size), antialias=True)
        else:
            short = self.first.size[0] if isinstance(self.first.size, (list, tuple)) else self.first.size
            image, _ = decode(data, reduce=min(size) / short)
            image = F.resize(image, [short], antialias=True)
        return self.rest(image)


def fuse_normalise(steps: list[Any]) -> list[Any]:
    """ToDtype(float32, scale=True) then Normalize(mean, std) -> one step computing (x - 255 mean) / (255 std) on
    the uint8 values: the same numbers (to float rounding) in one pass fewer over the image."""
    import torch
    from torchvision.transforms import v2

    out: list[Any] = []
    for step in steps:
        if (isinstance(step, v2.Normalize) and out and isinstance(out[-1], v2.ToDtype) and out[-1].scale
                and out[-1].dtype in (torch.float32, {torch.Tensor: torch.float32})):
            out[-1] = ScaledNormalise(step.mean, step.std)
        else:
            out.append(step)
    return out


class ScaledNormalise:
    def __init__(self, mean: Any, std: Any):
        import torch

        from fasttrain.datasets.transforms import MEAN, STD

        self.standard = tuple(mean) == MEAN and tuple(std) == STD
        self.mean = torch.tensor([255.0 * m for m in mean]).view(-1, 1, 1)
        self.inv_std = torch.tensor([1.0 / (255.0 * s) for s in std]).view(-1, 1, 1)
        self._on: dict[Any, tuple[Any, Any]] = {}

    def __call__(self, image: Any) -> Any:
        import torch

        if image.device not in self._on:
            self._on[image.device] = (self.mean.to(image.device), self.inv_std.to(image.device))
        mean, inv_std = self._on[image.device]
        return image.to(torch.float32).sub_(mean).mul_(inv_std)


_STANDARD: list[ScaledNormalise] = []


def normalise_batch(images: Tensor | None) -> Tensor | None:
    """A uint8 batch from a path that left normalisation to the device -> float32, normalised with the ImageNet
    statistics exactly as transforms' ToDtype + Normalize do (to float rounding); any other batch unchanged.
    Called on the training device (train's StepEngine.to_device), so on a GPU the host never does this pass."""
    import torch

    if images is None or images.dtype != torch.uint8:
        return images
    if not _STANDARD:
        from fasttrain.datasets.transforms import MEAN, STD

        _STANDARD.append(ScaledNormalise(MEAN, STD))
    return _STANDARD[0](images)


def _sized(size: tuple[int, int]) -> Any:
    """A zero-byte tensor view of the image's size: all RandomResizedCrop asks of the image to draw a crop."""
    import torch

    return torch.empty((1, 1, 1), dtype=torch.uint8).expand(1, *size)


class EncodedImages:
    """Base of the datasets that hold encoded bytes: (seed, index) -> (tensor, label) | BadSample, like ImageFiles.

    Subclasses give `samples` (name, label) and `read(index) -> bytes`."""

    samples: list[tuple[str, int]]

    def __init__(self, transform: Callable[[bytes], Any] | None):
        self.transform = transform
        self.targets = [t for _, t in self.samples]

    def read(self, index: int) -> bytes:
        raise NotImplementedError

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[Any, int] | BadSample:
        from fasttrain.datasets.transforms import transformed

        sample_seed, index = key if isinstance(key, tuple) else (None, key)
        name, target = self.samples[index]
        try:
            return transformed(self.transform, self.read(index), sample_seed), target
        except DECODE_ERRORS as exc:
            return BadSample(name, f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            if type(exc).__name__ == "DecompressionBombError":
                return BadSample(name, f"{type(exc).__name__}: {exc}")
            raise


class FastImageFiles(EncodedImages):
    """Image files of a folder through the fast path: (path, label) pairs, read as bytes."""

    def __init__(self, samples: list[tuple[str, int]], transform: Any):
        self.samples = samples
        super().__init__(FastTransform(transform) if transform is not None else None)

    def read(self, index: int) -> bytes:
        with open(self.samples[index][0], "rb") as fh:
            return fh.read()


def mostly_jpeg(samples: list[tuple[str, int]], probe: int = 32) -> bool:
    """Do these files look like JPEGs (by extension, over an even sample)? The fast path pays off on them."""
    if not samples:
        return False
    step = max(1, len(samples) // probe)
    picked = samples[::step][:probe]
    return sum(p.lower().endswith((".jpg", ".jpeg")) for p, _ in picked) * 2 > len(picked)
