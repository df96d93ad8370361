"""A list of image files held decoded in RAM as one padded uint8 tensor: decoded the first time a batch draws
each image (in threads when the images are large enough to repay them), augmented a whole batch at a time
(datasets/batch_augment.py), saved once complete (datasets/pixel_cache.py). Whether a set is held this way at all
is datasets/decoded.py's choice."""
from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING

from fasttrain.datasets.fast_decode import decode, file_errors
from fasttrain.datasets.inference import val_pixels
from fasttrain.datasets.pixel_cache import save_pixels
from fasttrain.datasets.transforms import CROP_PCT, IMAGENET, Norm
from fasttrain.profiles.schema import AugmentSpec

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor

# Decoding threads repay themselves only for images that take long to decode: PIL and libjpeg release the GIL
# while they decode, but each image also costs ~50 us of Python under the GIL (open, convert, store). Measured on
# the 2-core machine, per image, 1 thread -> 2 threads: digits PNGs at 32 px 72 -> 164 us (a pool is 2.3x
# slower), JPEG photos at 128 px 123 -> 165-192 us, 256 px 340 -> 285-385 us, 448 px 790 -> 500-600 us.
POOL_MIN_S = 300e-6   # median single-thread decode per image from which the pool is used
SAMPLE_IMAGES = 8     # images decoded one by one and timed before the choice is made


def pool_pays(seconds_per_image: list[float], threads: int) -> bool:
    """Whether decoding in `threads` threads beats one, from single-thread decode times (median: the first file
    of a kind also pays for imports). Pure."""
    return threads > 1 and len(seconds_per_image) >= SAMPLE_IMAGES and \
        statistics.median(seconds_per_image) >= POOL_MIN_S


class DecodedImages:
    """A list of image files held as one padded uint8 tensor, decoded on first use, augmented per batch.

    `augment` None: the validation transform, applied once as each image is decoded (inference.val_pixels).
    `batch(indices, keys)` -> (float images or None, targets, [(path, reason)] of files that could not be decoded),
    as the per-image path's collate function returns."""

    def __init__(self, samples: list[tuple[str, int]], sizes: Tensor, bad: dict[int, str], image_size: int,
                 augment: AugmentSpec | None, cache_file: Path | None = None, threads: int = 1,
                 pixels: Tensor | None = None, norm: Norm = IMAGENET, crop_pct: float = CROP_PCT):
        """`pixels`: a saved set (load_pixels), every image already decoded; None: decode on first use.
        `norm`: the run's (mean, std), applied to each batch (the pixels are kept as uint8)."""
        import torch

        self.samples = samples
        self.targets = [t for _, t in samples]
        self.image_size = image_size
        self.augment = augment
        self.norm = norm
        self.crop_pct = crop_pct   # validation's centre crop (augment None)
        self.cache_file = cache_file
        self.threads = max(1, threads)
        self.sizes = sizes
        self.bad = dict(bad)
        self.saved = pixels is not None
        # Validation holds each image as validation sees it (inference.val_pixels: the per-image path's and
        # predict's pixels exactly); training holds the whole image, padded, for its random crops.
        held = (image_size, image_size) if augment is None else (int(sizes[:, 0].max()), int(sizes[:, 1].max()))
        self.pixels = pixels if pixels is not None else torch.zeros(len(samples), 3, *held, dtype=torch.uint8)
        self.ready = torch.full((len(samples),), self.saved, dtype=torch.bool)
        for i in self.bad:
            self.ready[i] = True
        self._targets = torch.tensor(self.targets, dtype=torch.long)
        self.decode_times: list[float] = []   # single-thread decode seconds of the first images (pool_pays decides)

    def __len__(self) -> int:
        return len(self.samples)

    @property
    def nbytes(self) -> int:
        return self.pixels.numel()

    def batch(self, indices: list[int], keys: np.ndarray) -> tuple[Tensor | None, Tensor, list[tuple[str, str]]]:
        """`keys`: batch_augment.sample_keys of `indices` (the images' random draws); unused for validation."""
        import torch

        from fasttrain.datasets import batch_augment

        self.ensure(indices)
        bad = [(self.samples[i][0], self.bad[i]) for i in indices if i in self.bad]
        kept = [k for k, i in enumerate(indices) if i not in self.bad]
        if not kept:
            return None, torch.empty(0, dtype=torch.long), bad
        keep = torch.tensor([indices[k] for k in kept], dtype=torch.long)
        pixels, sizes = self.pixels[keep], self.sizes[keep]
        if self.augment is None:
            images = batch_augment.normalise(pixels.float(), self.norm)
        else:
            images = batch_augment.train_batch(pixels, sizes, self.image_size,
                                               self.augment.random_resized_crop_scale,
                                               self.augment.hflip, keys[kept], self.norm)
        return images, self._targets[keep], bad

    def ensure(self, indices: list[int]) -> None:
        """Decode the images among `indices` that are not decoded yet: one by one, timed, until SAMPLE_IMAGES
        are; then in threads if pool_pays says large images repay them (PIL and libjpeg release the GIL while
        they decode), else still one by one."""
        missing = sorted({i for i in indices if not bool(self.ready[i])})
        while missing and len(self.decode_times) < SAMPLE_IMAGES:
            i = missing.pop(0)
            t0 = time.perf_counter()
            self._decode_one(i)
            self.decode_times.append(time.perf_counter() - t0)
        if not missing:
            return
        if len(missing) > 1 and pool_pays(self.decode_times, self.threads):
            from concurrent.futures import ThreadPoolExecutor
            with ThreadPoolExecutor(min(self.threads, len(missing))) as pool:
                list(pool.map(self._decode_one, missing))
        else:
            for i in missing:
                self._decode_one(i)

    def _decode_one(self, i: int) -> None:

        path = self.samples[i][0]
        try:
            with open(path, "rb") as f:
                data = f.read()
            if self.augment is None:
                self.pixels[i] = val_pixels(data, self.image_size, self.crop_pct)
                self.ready[i] = True
                return
            tensor, _ = decode(data)
        except file_errors() as exc:
            self.bad[i] = f"{type(exc).__name__}: {exc}"
        else:
            h, w = int(tensor.shape[1]), int(tensor.shape[2])
            if h > self.pixels.shape[2] or w > self.pixels.shape[3]:  # the file changed since its header was read
                self.bad[i] = f"decoded {w}x{h} px, larger than its header said when the run started"
            else:
                self._store(i, tensor, h, w)
        self.ready[i] = True

    def _store(self, i: int, tensor: Tensor, h: int, w: int) -> None:
        """The image at the top-left of its padded slot, with its last row and column repeated once into the
        padding, so bilinear samples at the image's edge read the edge (as interpolation at a border does)."""
        slot = self.pixels[i]
        slot[:, :h, :w] = tensor
        if w < slot.shape[2]:
            slot[:, :h, w] = slot[:, :h, w - 1]
        if h < slot.shape[1]:
            slot[:, h, : min(w + 1, slot.shape[2])] = slot[:, h - 1, : min(w + 1, slot.shape[2])]
        self.sizes[i, 0], self.sizes[i, 1] = h, w

    def pass_done(self) -> None:
        """After a pass over the data: decode the few images the pass did not draw (drop_last leaves up to a
        batch out), then save the pixels once for later runs. A rank of a multi-process run sees only its
        share; it saves nothing."""
        if self.saved or self.cache_file is None:
            return
        missing = [i for i in range(len(self)) if not bool(self.ready[i])]
        if len(missing) > max(256, len(self) // 8):
            return
        self.ensure(missing)
        self.saved = save_pixels(self.cache_file, self.pixels, self.sizes, self.bad)
