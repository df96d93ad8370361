"""`estimate --data DIR`: what `train` would do with the folder here (decode it once into RAM, or per image in
loader workers), how many training images it holds, and the loader rate measured on a sample of its files."""
from __future__ import annotations

from pathlib import Path

from fasttrain.core.errors import UserError
from fasttrain.estimate.forecast import LoaderSample
from fasttrain.estimate.gather import local_report
from fasttrain.hardware.report import HardwareReport
from fasttrain.profiles.schema import Profile


def sample_data(data: Path, profile: Profile, decoded_once: bool = False) -> tuple[int, LoaderSample]:
    """(training images, the loader's measured rate). `decoded_once`: train decodes the folder once into RAM on
    this machine (decoded_here): the rate is then the batched augmentation's."""
    from fasttrain.estimate import loader_sample
    count, files = loader_sample.scan(data)
    if decoded_once:
        return count, loader_sample.measure_batched(files, profile.augment, profile.loader.image_size,
                                                    profile.loader.batch_size)
    return count, loader_sample.measure(files, profile.augment, profile.loader.image_size)


def decoded_here(data: Path, profile: Profile, local: HardwareReport | None, gpu_flag: str | None) -> str | None:
    """train's words for a folder it decodes once into RAM on this machine (a CPU target), else None."""
    if gpu_flag or profile.hardware.gpu or not data.is_dir():
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
