"""Small image sets decoded once into RAM, then augmented a whole batch at a time in the training process.

On a CPU the per-image path (a worker decodes a PNG and runs the transform pipeline per image) costs about as
much CPU per batch again as it saves by running beside compute: on the built-in shapes set at 64 px, 27 ms of a
worker per batch of 64, on the same cores as the training step. When the decoded pixels of a folder fit in a
small share of RAM, fasttrain instead:
1. reads each file's header for its size (0.14 s for 5,400 PNGs) and decides whether the set fits;
2. decodes each image the first time a batch draws it (so the first epoch does no more decoding than the
   per-image path; in threads only for images large enough to repay them, decoded_images.pool_pays), into one
   padded uint8 tensor;
3. augments each batch with datasets.batch_augment (crop, resize, flip, normalise as a few tensor ops);
4. once every image is decoded, saves the pixels under the fasttrain cache (`decoded/<key>.npz`, the key a hash
   of every file's path, size and modification time), so later runs on the same files skip the decoding.
No loader workers run, so every core computes. A cache that cannot be written (full disk, read-only) only
costs the next run its decoding.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fasttrain.core import arithmetic as ar
from fasttrain.core.cache_dir import default_cache_dir
from fasttrain.core.errors import UserError
from fasttrain.datasets.decoded_images import DecodedImages
from fasttrain.datasets.fast_decode import file_errors
from fasttrain.datasets.pixel_cache import CACHE_SUBDIR, cache_key, load_pixels
from fasttrain.datasets.transforms import CROP_PCT, IMAGENET, Norm
from fasttrain.hardware.report import HardwareReport
from fasttrain.profiles.schema import AugmentSpec, Profile

if TYPE_CHECKING:
    from torch import Tensor

MAX_SIDE_OVER_CROP = 4  # images more than 4x the crop side waste RAM on pixels every crop throws away
HEADER_SAMPLE = 256     # headers read before projecting the whole set's size, so a huge set is refused quickly
IN_MEMORY = "the images are decoded once into RAM"  # the plan's reason for 0 workers (bundle.in_memory)


@dataclass(frozen=True)
class DecodeBudget:
    """What `train` allows: decoded pixels of train + val within `ram_bytes`; `cache_dir` None: no disk cache."""

    ram_bytes: int
    cache_dir: Path | None = None
    threads: int = 1


def decode_budget(profile: Profile, report: HardwareReport) -> DecodeBudget | None:
    """How much RAM an image folder may take decoded once (datasets/decoded.py): a quarter of the loader RAM
    budget, shared by the processes of this machine; None on a GPU (its workers decode beside the device) or
    with loader.decode_once off."""
    if not profile.loader.decode_once or report.has_cuda:
        return None
    try:
        cache: Path | None = default_cache_dir()
    except UserError:  # a bad FASTTRAIN_CACHE: decode anyway, keep nothing (the shapes set says why, if used)
        cache = None
    budget = ar.ram_budget_bytes(report.memory.ram_total_bytes / ar.GIB, profile.hardware.ram_budget_fraction)
    return DecodeBudget(ram_bytes=budget // 4 // profile.world.gpus_per_node, cache_dir=cache,
                        threads=max(1, report.cores // profile.world.gpus_per_node))


def unbatched_augment(augment: AugmentSpec) -> list[str]:
    """The profile's augmentation steps batch_augment does not do (they need the per-image pipeline). Pure."""
    steps = {"rotation_degrees": augment.rotation_degrees, "translate": augment.translate,
             "color_jitter": augment.color_jitter, "random_erasing": augment.random_erasing}
    return [f"augment.{name}" for name, value in steps.items() if value > 0]


def per_image_reason(augment: AugmentSpec) -> str | None:
    """"augment.x and augment.y need the per-image pipeline", or None when batch_augment does them all. Pure."""
    names = unbatched_augment(augment)
    if not names:
        return None
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"{listed} need{'s' if len(names) == 1 else ''} the per-image pipeline"


def fit_reason(images: int, max_h: int, max_w: int, image_size: int, budget: int) -> str | None:
    """Why a set of `images` padded to max_h x max_w cannot be decoded once into a RAM budget of `budget`
    bytes, or None when it can. Pure."""
    from fasttrain.core.format import fmt_bytes

    need = images * 3 * max_h * max_w
    if need > budget:
        return (f"{images:,} decoded images would take {fmt_bytes(need)}, over the {fmt_bytes(max(budget, 0))} "
                "allowed (a quarter of the loader RAM budget)")
    if max(max_h, max_w) > MAX_SIDE_OVER_CROP * image_size:
        return (f"images up to {max_w}x{max_h} px are over {MAX_SIDE_OVER_CROP}x the {image_size} px crop: "
                "RAM would hold pixels the crops throw away")
    return None


def read_sizes(samples: list[tuple[str, int]], image_size: int, budget: int) -> tuple[Tensor, dict[int, str]] | str:
    """(int tensor (N, 2) of (height, width), {index: reason} for files whose header cannot be read) from the
    files' headers, or the reason the set does not fit. The padded size only grows with more headers, so once
    the first HEADER_SAMPLE already put the set over the budget the answer is known and the rest are not read."""
    import torch
    from PIL import Image

    sizes = torch.ones(len(samples), 2, dtype=torch.int32)
    bad: dict[int, str] = {}
    if not samples:  # nothing to decode (an empty split): it fits, and max() of nothing is an error
        return sizes, bad
    for i, (path, _) in enumerate(samples):
        try:
            with Image.open(path) as img:
                sizes[i, 1], sizes[i, 0] = img.size
        except file_errors() as exc:
            bad[i] = f"{type(exc).__name__}: {exc}"
        if i + 1 == HEADER_SAMPLE and i + 1 < len(samples):
            seen = sizes[: i + 1]
            early = fit_reason(len(samples), int(seen[:, 0].max()), int(seen[:, 1].max()), image_size, budget)
            if early is not None:
                return early
    why = fit_reason(len(samples), int(sizes[:, 0].max()), int(sizes[:, 1].max()), image_size, budget)
    return why if why is not None else (sizes, bad)


def open_decoded(samples: list[tuple[str, int]], image_size: int, augment: AugmentSpec | None, ram_bytes: int,
                 budget: DecodeBudget, norm: Norm = IMAGENET, crop_pct: float = CROP_PCT) -> DecodedImages | str:
    """The files as a DecodedImages (their saved pixels when the cache has them), or why they do not fit.
    `crop_pct`: validation's (augment None) centre crop."""
    key = cache_key(samples) if budget.cache_dir is not None else None
    if key and augment is None:  # validation keeps its pixels at the crop (DecodedImages): their own file
        key = f"{key}-val{image_size}" + (f"-crop{crop_pct:g}" if crop_pct != CROP_PCT else "")
    cache_file = budget.cache_dir / CACHE_SUBDIR / f"{key}.npz" if budget.cache_dir is not None and key else None
    saved = load_pixels(cache_file, len(samples)) if cache_file is not None else None
    if saved is not None and augment is None and tuple(saved[0].shape[2:]) != (image_size, image_size):
        saved = None
    if saved is not None:
        pixels, sizes, bad = saved
        why = fit_reason(len(samples), int(pixels.shape[2]), int(pixels.shape[3]), image_size, ram_bytes)
        if why is not None:
            return why
        return DecodedImages(samples, sizes, bad, image_size, augment, cache_file, budget.threads, pixels=pixels,
                             norm=norm, crop_pct=crop_pct)
    scanned = read_sizes(samples, image_size, ram_bytes)
    if isinstance(scanned, str):
        return scanned
    sizes, bad = scanned
    return DecodedImages(samples, sizes, bad, image_size, augment, cache_file, budget.threads, norm=norm,
                         crop_pct=crop_pct)


def decode_splits(train: list[tuple[str, int]], val: list[tuple[str, int]], image_size: int, augment: AugmentSpec,
                  budget: DecodeBudget, norm: Norm = IMAGENET) -> tuple[DecodedImages, DecodedImages, str] | str:
    """(train, val, what happens in words) held decoded in RAM, or why the per-image path stays."""
    per_image = per_image_reason(augment)
    if per_image is not None:
        return per_image
    train_set = open_decoded(train, image_size, augment, budget.ram_bytes, budget, norm)
    if isinstance(train_set, str):
        return train_set
    val_set = open_decoded(val, image_size, None, budget.ram_bytes - train_set.nbytes, budget, norm,
                           crop_pct=augment.val_crop_pct)
    if isinstance(val_set, str):
        return val_set
    from fasttrain.core.format import fmt_bytes

    total = train_set.nbytes + val_set.nbytes
    when = ("from the cache of an earlier run" if train_set.saved and val_set.saved
            else "each the first time a batch draws it, then cached")
    return train_set, val_set, (f"the {len(train) + len(val):,} images are decoded once into RAM "
                                f"({fmt_bytes(total)}, {when}) and augmented a batch at a time")


def would_decode(root: Path, profile: Profile, report: HardwareReport) -> tuple[bool, str]:
    """(whether `train --data root` decodes the images once into RAM on this machine, what it does in words),
    reading file headers only (doctor, estimate); `root` an image folder or a labels table (datasets/data_source.py,
    its columns as the profile's data: spec says)."""
    from fasttrain.datasets.data_source import find_samples
    from fasttrain.datasets.image_folder import VAL_FRACTION

    per_epoch = "train decodes every image each epoch in loader workers"
    budget = decode_budget(profile, report)
    if budget is None:
        return False, f"{per_epoch} (" + ("loader.decode_once is off)" if not profile.loader.decode_once
                                          else "on a GPU)")
    why = per_image_reason(profile.augment)
    if why is not None:
        return False, f"{per_epoch}: {why}"
    # a folder or a labels table, as train reads it; the union of the splits is the same for every seed
    _, train, val = find_samples(root, seed=0, val_fraction=VAL_FRACTION, spec=profile.data)
    sized = read_sizes(train + val, profile.loader.image_size, budget.ram_bytes)
    if isinstance(sized, str):
        return False, f"{per_epoch}: {sized}"
    sizes, _ = sized
    pixels = len(sizes) * 3 * int(sizes[:, 0].max()) * int(sizes[:, 1].max())
    from fasttrain.core.format import fmt_bytes
    return True, (f"train decodes the {len(sizes):,} images once into RAM ({fmt_bytes(pixels)}) and augments a "
                  "batch at a time, with no loader workers")
