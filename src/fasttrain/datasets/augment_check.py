"""The preset's augmentation checked against an image folder or a prepared shard set, the same way wherever a
command reads the data (`train` before it plans, `estimate --data` before it forecasts): flips
(datasets/flip_check.py) and the crop's smallest area (datasets/crop_check.py), both measured on one sample of
thumbnails. A preset's flips are turned off for data whose classes have a handedness (digits, letters), a
preset's crop made gentler where its crops cut the class away (small images the class fills), and small images
validated whole (datasets/val_crop.py); what the user set stays, with a warning. The same sample's sizes say
when the plan upscales small images (datasets/upscale_check.py)."""
from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.profiles.presets import Resolved
from fasttrain.profiles.schema import DataSpec

if TYPE_CHECKING:
    from fasttrain.datasets.flip_check import ThumbSample

# Shards of a prepared set indexed for the sample (tar headers read, ~30 ms per 1000-image shard): enough images
# for the sample on any set, bounded on a large one.
SAMPLE_SHARDS = 16


def check_augment(folder: Path, resolved: Resolved, seed: int) -> tuple[Resolved, list[str]]:
    """-> (the profile with the checks' changes, the plan's notes). A folder of class folders or a labels table
    (train.csv) is sampled by file; a prepared shard set (`fasttrain data prepare`) by its training shards'
    members."""
    from fasttrain.datasets.crop_check import crop_test
    from fasttrain.datasets.flip_check import mirror_test, shrunk
    from fasttrain.datasets.upscale_check import upscale_note
    from fasttrain.datasets.val_crop import WHOLE_IMAGE, whole_image_note

    augment = resolved.profile.augment
    classes, sample = _sample(folder, seed, resolved.profile.data)
    thumbs, labels = sample.thumbs, sample.labels
    upscaling = upscale_note(sample.sides, resolved.profile.loader.image_size)
    flags: dict[str, tuple[str, Any]] = {}
    notes = [upscaling] if upscaling else []
    hflip = augment.hflip
    test = mirror_test(shrunk(thumbs), labels, len(classes)) if hflip > 0 else None
    if test is not None and test.handed:
        if resolved.user_set("augment.hflip"):
            notes.append(f"warning: augment.hflip={hflip:g} (yours) mirrors images whose classes look handed: "
                         f"{test.words()}; digits or text? --set augment.hflip=0")
        else:
            flags["augment.hflip"] = ("flip check", 0.0)
            notes.append(f"augment: flips off, the classes look handed ({test.words()}); --set augment.hflip=0.5 to "
                         "keep them")
    low, high = augment.random_resized_crop_scale
    crops = crop_test(thumbs, labels, len(classes), low, seed=seed) if low < min(high, 1.0) else None
    safe = crops.smallest_safe(low) if crops is not None else low
    if crops is not None and safe > low:
        if resolved.user_set("augment.random_resized_crop_scale"):
            notes.append(f"warning: augment.random_resized_crop_scale=[{low:g}, {high:g}] (yours) cuts the class away: "
                         f"{crops.words(low)}; --set augment.random_resized_crop_scale=[{safe:g},{high:g}]")
        else:
            gentler = (safe, max(safe, high))
            flags["augment.random_resized_crop_scale"] = ("crop check", gentler)
            notes.append(f"augment: crops of at least {safe:.0%} of the area (not {low:.0%}): the class fills the "
                         f"image ({crops.words(low)}); --set augment.random_resized_crop_scale=[{low:g},{high:g}] "
                         "to keep the preset's")
    whole = whole_image_note(sample.sides, augment.val_crop_pct)
    if whole is not None and not resolved.user_set("augment.val_crop_pct"):
        flags["augment.val_crop_pct"] = ("small images", WHOLE_IMAGE)
        notes.append(whole)
    return (resolved.with_flags(flags) if flags else resolved), notes


def _sample(folder: Path, seed: int, spec: DataSpec) -> tuple[list[str], ThumbSample]:
    """The class names and a random sample of 32 px grey thumbnails of the training split, with their labels and
    sizes (`folder`: an image folder, a prepared shard set, or a labels table with `spec` saying its columns)."""
    from fasttrain.datasets.flip_check import sample_images
    from fasttrain.datasets.shards import ShardImages, is_prepared, load_manifest

    if is_prepared(folder):
        import random
        import tarfile
        manifest = load_manifest(folder)
        shards = list(manifest["splits"]["train"]["shards"])
        random.Random(seed).shuffle(shards)
        try:
            train = ShardImages(folder, [s for s in shards[:SAMPLE_SHARDS] if (folder / s["name"]).is_file()], None)
        except (OSError, ValueError, KeyError, tarfile.TarError):  # a damaged shard: loading names it, in one line
            return list(manifest["classes"]), sample_images([])
        members = [(i, label) for i, (_, label) in enumerate(train.samples)]
        return list(manifest["classes"]), sample_images(members, seed=seed, size=32,
                                                        open_source=lambda i: io.BytesIO(train.read(i)))
    from fasttrain.datasets.data_source import find_samples
    from fasttrain.datasets.image_folder import VAL_FRACTION
    classes, train_files, _ = find_samples(folder, seed=seed, val_fraction=VAL_FRACTION, spec=spec)
    return classes, sample_images(train_files, seed=seed, size=32)
