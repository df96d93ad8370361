"""Images to predict on, preprocessed exactly as a run validated them.

`val_pixels` is the one validation preprocessing of a file: resize the short side to image_size / crop_pct, centre
crop image_size, as uint8. A JPEG goes the fast path's way (fast_decode.py: libjpeg-turbo, reduced-size DCT
decoding when the image is at least twice the resize, then a tensor resize), any other image PIL's way (the
per-image path's transforms.val_transform). The per-image validation set, the one decoded once into RAM
(decoded_images.py) and `fasttrain predict` all give the same pixels, so a submission scores what validation
measured. `image_files` lists what to predict on; `batches` reads them; unreadable files are returned beside the
batches, never a stop.
"""
from __future__ import annotations

import io
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fasttrain.core.errors import Problem, UserError
from fasttrain.datasets.fast_decode import (
    ScaledNormalise,
    decode,
    file_errors,
    header_size,
    is_jpeg,
)
from fasttrain.datasets.image_folder import IMAGE_EXTENSIONS
from fasttrain.datasets.transforms import resize_side

if TYPE_CHECKING:
    import torch


def image_files(root: Path) -> list[Path]:
    """Image files under `root` (or `root` itself when it is one), sorted; a UserError when there are none."""
    if root.is_file():
        return [root]
    if not root.is_dir():
        raise UserError([Problem("--data", f"{str(root)!r} does not exist", "give a folder of images (any layout) or "
                                 "one image file", str(root))])
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        found += [Path(dirpath) / f for f in sorted(filenames)
                  if os.path.splitext(f)[1].lower() in IMAGE_EXTENSIONS and not f.startswith(".")]
    if not found:
        raise UserError([Problem("--data", f"no images in {str(root)!r}",
                                 f"supported extensions: {', '.join(sorted(IMAGE_EXTENSIONS))}", str(root))])
    return found


def val_pixels(data: bytes, image_size: int, crop_pct: float) -> torch.Tensor:
    """One encoded image -> uint8 (3, image_size, image_size), as validation sees it before normalisation.
    Raises what decoding raises (fast_decode.DECODE_ERRORS, PIL's DecompressionBombError)."""
    from torchvision.transforms.v2 import functional as F

    resize = resize_side(image_size, crop_pct)
    if is_jpeg(data):  # what FastTransform does with the validation transform
        image, _ = decode(data, reduce=min(header_size(data)) / resize)
        return F.center_crop(F.resize(image, [resize], antialias=True), [image_size])
    from PIL import Image

    with Image.open(io.BytesIO(data)) as opened:  # what ImageFiles does with val_transform
        rgb = opened.convert("RGB")
    return F.pil_to_tensor(F.center_crop(F.resize(rgb, [resize], antialias=True), [image_size]))


def batches(files: Sequence[Path], image_size: int, crop_pct: float, mean: Sequence[float], std: Sequence[float],
            batch_size: int) -> Iterator[tuple[list[Path], torch.Tensor | None, list[tuple[Path, str]]]]:
    """(files read, their images as one normalised float batch or None, (file, reason) for the unreadable ones)."""
    import torch

    normalise = ScaledNormalise(list(mean), list(std))
    for start in range(0, len(files), batch_size):
        read, images, bad = [], [], []
        for path in files[start:start + batch_size]:
            try:
                images.append(val_pixels(Path(path).read_bytes(), image_size, crop_pct))
                read.append(path)
            except file_errors() as exc:
                bad.append((path, f"{type(exc).__name__}: {exc}"))
        yield read, (normalise(torch.stack(images)) if images else None), bad
