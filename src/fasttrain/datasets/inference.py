"""Images to predict on: every image file under a folder (any layout), read in batches with the validation
transform a model was trained with (resize to size / crop_pct, centre crop, normalise). Unreadable files are
returned beside the batches, never a stop."""
from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fasttrain.core.errors import Problem, UserError
from fasttrain.datasets.image_folder import IMAGE_EXTENSIONS

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


def batches(files: Sequence[Path], image_size: int, crop_pct: float, mean: Sequence[float], std: Sequence[float],
            batch_size: int) -> Iterator[tuple[list[Path], torch.Tensor | None, list[tuple[Path, str]]]]:
    """(files read, their images as one normalised batch or None, (file, reason) for the unreadable ones)."""
    import torch
    from PIL import Image
    from torchvision.transforms import v2

    resize = max(image_size, round(image_size / crop_pct))
    transform = v2.Compose([v2.Resize(resize, antialias=True), v2.CenterCrop(image_size), v2.PILToTensor(),
                            v2.ToDtype(torch.float32, scale=True), v2.Normalize(list(mean), list(std))])
    for start in range(0, len(files), batch_size):
        read, images, bad = [], [], []
        for path in files[start:start + batch_size]:
            try:
                with Image.open(path) as img:
                    images.append(transform(img.convert("RGB")))
                read.append(path)
            except (OSError, ValueError, Image.DecompressionBombError) as exc:
                bad.append((path, f"{type(exc).__name__}: {exc}"))
        yield read, (torch.stack(images) if images else None), bad
