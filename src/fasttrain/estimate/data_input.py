"""`estimate --data DIR` (or a labels table, train.csv): what `train` would do with its images here (decode them
once into RAM, or per image in loader workers), how many training images it holds, and the loader rate measured on
a sample of its files."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from fasttrain.core.errors import UserError
from fasttrain.estimate.forecast import LoaderSample
from fasttrain.estimate.gather import Request, local_report
from fasttrain.hardware.report import HardwareReport
from fasttrain.profiles.presets import Resolved
from fasttrain.profiles.schema import Profile


def with_data(req: Request, data: Path, profile: Profile, local: HardwareReport | None,
              gpu_flag: str | None) -> tuple[Request, str | None]:
    """(`req` with the folder's training images and the loader rate measured on a sample, train's words for
    decoding it once into RAM here or None): where train decodes it once, the request says so (in_memory) and the
    rate is the batched augmentation's."""
    decoding = decoded_here(data, profile, local, gpu_flag)
    from fasttrain.datasets.decoded import IN_MEMORY
    count, val_count, sample = sample_data(data, profile, decoded_once=decoding is not None)
    return dataclasses.replace(req, in_memory=IN_MEMORY if decoding else None, dataset_size=count, loader=sample,
                               val_size=val_count,
                               dataset_size_source=f"--data ({count:,} training images, split as train does)"), decoding


def checked_augment(data: Path, resolved: Resolved) -> tuple[Resolved, list[str]]:
    """The flip and crop checks `train` runs on an image folder before it plans (datasets/augment_check.py, with
    train's default seed), so the forecast prices what train will run (flips off for digits: no mirrored
    validation) -> (the profile, the notes train's plan would show)."""
    from fasttrain.datasets.data_source import table_of
    if not data.is_dir() and table_of(data) is None:
        return resolved, []
    from fasttrain.datasets.augment_check import check_augment
    from fasttrain.estimate.loader_sample import TRAIN_SEED
    return check_augment(data, resolved, TRAIN_SEED)


def sample_data(data: Path, profile: Profile, decoded_once: bool = False) -> tuple[int, int, LoaderSample]:
    """(training images, validation images, the loader's measured rate). `decoded_once`: train decodes the
    folder once into RAM on this machine (decoded_here): the rate is then the batched augmentation's."""
    from fasttrain.estimate import loader_sample
    count, val_count, files = loader_sample.scan(data, profile.data)  # a folder, a labels table or a prepared set
    if decoded_once:
        return count, val_count, loader_sample.measure_batched(files, profile.augment, profile.loader.image_size,
                                                               profile.loader.batch_size)
    return count, val_count, loader_sample.measure(files, profile.augment, profile.loader.image_size)


def decoded_here(data: Path, profile: Profile, local: HardwareReport | None, gpu_flag: str | None) -> str | None:
    """train's words for a folder or labels table it decodes once into RAM on this machine (a CPU target), else
    None."""
    from fasttrain.datasets.data_source import table_of
    if gpu_flag or profile.hardware.gpu or (not data.is_dir() and table_of(data) is None):
        return None
    from fasttrain.datasets.decoded import would_decode
    from fasttrain.datasets.shards import is_prepared
    if is_prepared(data):
        return None
    try:
        decoded, words = would_decode(data, profile, local or local_report())
    except UserError:
        return None
    return words if decoded else None
