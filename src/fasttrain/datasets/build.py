"""Turn a `--data` spec into train and validation datasets: shapes | synthetic | DIR | TABLE.csv | module:callable.

Every bad input is a UserError with a one-line reason. Corrupt or unreadable image files do not stop a run:
the dataset hands back a `BadSample`, the collate function drops it and the loader records its path in the
bundle (`bundle.bad_files()`), in the main process, so it works the same with worker processes. With
strict=True the loader raises a UserError naming the file instead.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from fasttrain.core.errors import Problem, UserError
from fasttrain.core.given import datasets as given_datasets
from fasttrain.core.given import is_given
from fasttrain.core.paths import expand_user
from fasttrain.datasets.bundle import BadSample, DataBundle
from fasttrain.datasets.decoded import DecodeBudget
from fasttrain.datasets.image_folder import VAL_FRACTION, Samples
from fasttrain.datasets.transforms import IMAGENET, Norm
from fasttrain.profiles.schema import AugmentSpec, DataSpec

if TYPE_CHECKING:
    from torch import Tensor

# `synthetic` has no files; this many samples make one epoch, so iterations per epoch stay meaningful.
SYNTHETIC_EPOCH_SAMPLES = 10_000
SYNTHETIC_NUM_CLASSES = 10
# PIL raises these for unreadable, truncated or hostile files.
_DECODE_ERRORS: tuple[type[BaseException], ...] = (OSError, ValueError, SyntaxError)


class ImageFiles:
    """(path, class index) pairs read with PIL, converted to RGB and transformed.

    An index may come as a plain int or as (sample_seed, int): with a seed, torch's generator is seeded
    per sample, so random augmentation is a pure function of (seed, epoch, index) whatever the worker count,
    and a resumed run sees the same crops. In the main process the generator state is restored afterwards.
    """

    def __init__(self, samples: list[tuple[str, int]], transform: Callable[[Any], Any] | None):
        self.samples = samples
        self.transform = transform
        self.targets = [t for _, t in samples]

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, key: int | tuple[int, int]) -> tuple[Any, int] | BadSample:
        sample_seed, index = key if isinstance(key, tuple) else (None, key)
        from PIL import Image

        path, target = self.samples[index]
        errors: tuple[type[BaseException], ...] = (*_DECODE_ERRORS, Image.DecompressionBombError)  # typed: see
        try:                                                                 # fast_decode.file_errors()
            with Image.open(path) as opened:
                image = opened.convert("RGB")
        except errors as exc:
            return BadSample(path, f"{type(exc).__name__}: {exc}")
        from fasttrain.datasets.transforms import transformed

        return transformed(self.transform, image, sample_seed), target


def build_datasets(spec: str, *, image_size: int, augment: AugmentSpec, seed: int = 0,
                   val_fraction: float = VAL_FRACTION, strict: bool = False, num_classes: int | None = None,
                   decode: DecodeBudget | None = None, table: DataSpec | None = None,
                   norm: Norm = IMAGENET) -> DataBundle:
    """`spec`: "shapes" (built-in, generated and cached), "synthetic" (tensors made on the device),
    a directory (ImageFolder tree), a labels table (train.csv beside its images: datasets/data_source.py, with
    `table` saying its columns), or "module:callable" returning (train, val) or (train, val, num_classes).
    `decode`: image folders that fit it are decoded once into RAM (datasets/decoded.py); None: never.
    `norm`: the (mean, std) image files are normalised with (ImageNet's, or pretrained weights' own)."""
    from fasttrain.datasets.sampler import check_seed
    check_seed(seed)  # numpy's default_rng refuses negatives, torch overflows: refuse before any of them sees it
    if not spec or not spec.strip():
        raise UserError([Problem("--data", "empty data spec" if not spec else "blank data spec (only whitespace)",
                                 "use shapes, synthetic, a directory or module:callable", spec)])
    if "\x00" in spec:
        raise UserError([Problem("--data", "the data spec contains a NUL byte",
                                 "use shapes, synthetic, a directory or module:callable", spec)])
    if is_given(spec):  # a (train, val) pair or a DataFrame handed to the Python API (core/given.py)
        return _given_bundle(spec, num_classes, image_size, augment, seed, val_fraction, strict, decode, table,
                             norm)
    if spec == "shapes":
        from fasttrain.datasets.image_folder import find_splits
        from fasttrain.datasets.shapes import ensure_shapes

        # The set itself is fixed (data seed 0); `seed` still drives the split, order and augmentation.
        samples = find_splits(ensure_shapes(seed=0), seed=seed, val_fraction=val_fraction)
        return _image_bundle(samples, "shapes", image_size, augment, strict, decode, norm)
    if spec == "synthetic":
        return DataBundle(train=None, val=None, num_classes=num_classes or SYNTHETIC_NUM_CLASSES,
                          class_names=[], kind="synthetic", source="synthetic",
                          train_size=SYNTHETIC_EPOCH_SAMPLES, strict=strict,
                          in_memory="synthetic data are tensors in memory")
    path = expand_user(spec, "--data", "give the folder's full path")
    from fasttrain.datasets.shards import is_prepared, shard_bundle

    if path.is_dir() and is_prepared(path):
        return shard_bundle(path, spec, image_size, augment, strict, norm)
    if path.exists() or "/" in spec or spec.startswith("."):
        from fasttrain.datasets.data_source import find_samples

        samples = find_samples(path, seed=seed, val_fraction=val_fraction, spec=table)
        return _image_bundle(samples, spec, image_size, augment, strict, decode, norm)
    if ":" in spec:
        from fasttrain.datasets.custom import custom_bundle

        return custom_bundle(spec, num_classes)
    raise UserError([Problem("--data", f"no directory {spec!r} and not a known data set",
                             "use shapes, synthetic, a directory with class folders, a labels table (train.csv), "
                             "or module:callable")])


def _given_bundle(spec: str, num_classes: int | None, image_size: int, augment: AugmentSpec, seed: int,
                  val_fraction: float, strict: bool, decode: DecodeBudget | None,
                  table: DataSpec | None, norm: Norm) -> DataBundle:
    """What the Python API handed over: a DataFrame of image paths and labels (relative to the current folder,
    or to data.images_dir), or a (train, val) pair of datasets."""
    from fasttrain.datasets.labels_table import is_frame_like

    given = given_datasets(spec)
    if is_frame_like(given):
        from fasttrain.datasets.data_source import frame_data

        data = frame_data(given, table or DataSpec(), seed=seed, val_fraction=val_fraction)
        return _image_bundle((data.classes, data.train, data.val), spec, image_size, augment, strict, decode, norm)
    from fasttrain.datasets.custom import datasets_bundle

    return datasets_bundle(given, spec, num_classes, said="the given (train, val) pair's")


def _image_bundle(samples: tuple[list[str], Samples, Samples], source: str, image_size: int, augment: AugmentSpec,
                  strict: bool, decode: DecodeBudget | None, norm: Norm = IMAGENET) -> DataBundle:
    """Image files as a bundle: decoded once into RAM when they fit `decode`, else the fast JPEG path or PIL."""
    class_names, train_samples, val_samples = samples
    train: Any = None
    val: Any = None
    note = in_memory = None
    if decode is not None:
        from fasttrain.datasets.decoded import IN_MEMORY, decode_splits

        decoded = decode_splits(train_samples, val_samples, image_size, augment, decode, norm)
        if isinstance(decoded, str):
            note = f"images decoded per epoch by loader workers: {decoded}"
        else:
            train, val, note = decoded
            in_memory = IN_MEMORY
    if train is None:
        from fasttrain.datasets.fast_decode import FastImageFiles, mostly_jpeg
        from fasttrain.datasets.transforms import train_transform, val_transform

        # JPEG folders take the fast path (libjpeg-turbo, reduced-size decoding, uint8 augmentation); others PIL.
        files = FastImageFiles if mostly_jpeg(train_samples) else ImageFiles
        train = files(train_samples, train_transform(augment, image_size, norm))
        val = files(val_samples, val_transform(image_size, augment.val_crop_pct, norm=norm))
    return DataBundle(train=train, val=val, num_classes=len(class_names), class_names=class_names, kind="images",
                      source=source, train_size=len(train), val_size=len(val), strict=strict, in_memory=in_memory,
                      input_note=note, norm=norm)


class SyntheticBatches:
    """`steps` batches of random images and labels made once on the device: measures the model alone.

    A few distinct batches cycle (not one) so that nothing can cache a single input; no host work per step.
    """

    DISTINCT = 4

    def __init__(self, batch_size: int, image_size: int, num_classes: int, device: Any, steps: int, seed: int = 0,
                 channels: int = 3):
        import torch

        generator = torch.Generator().manual_seed(seed)
        self.steps = steps
        self.batches = []
        for _ in range(min(self.DISTINCT, max(1, steps))):
            images = torch.randn(batch_size, channels, image_size, image_size, generator=generator)
            targets = torch.randint(0, num_classes, (batch_size,), generator=generator)
            self.batches.append((images.to(device), targets.to(device)))

    def shutdown(self) -> None:
        """Nothing to stop: no worker processes."""

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        for step in range(self.steps):
            yield self.batches[step % len(self.batches)]
