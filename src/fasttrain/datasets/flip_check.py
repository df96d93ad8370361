"""Are horizontal flips a valid augmentation for this data? Measured on the data itself, in a fraction of a second.

A flip is only an augmentation when a mirrored image still shows its own class: true of photographs of objects
and of the built-in shapes, false of digits, letters and text, where a mirrored 2 or 3 looks like nothing it was
taught, and it costs accuracy and time (measured on scikit-learn's digits: 97% at epoch 6 with flips, epoch 4
without; docs/benchmarks.md). The test: a nearest-class-mean classifier over small grey thumbnails, its class
means taken from one half of a sample of the training images, scores the other half as they are and mirrored.
Data whose classes are mirror-symmetric score the same both ways; data whose classes have a handedness lose a
clear share of what the classifier gets above chance, and a clear number of points. Where the classifier sees
little (hard photographs) there is no evidence against flips and they stay, as every image recipe has them: a
classifier of a photo's layout loses a few points on any mirrored image, handed classes or not (scikit-image's
photographs as 48 px patches, four seeds: 23-25% as they are, 16-21% mirrored, chance 10%; flips and a mirrored
validation then reach 85% an epoch sooner, docs/benchmarks.md). Digits lose most of what they have: 89-90% -> 29-34%.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

SAMPLE = 1024          # training images looked at (a random sample; ~0.1 s of small PNGs)
THUMB = 16             # thumbnail side, pixels: enough for a class's layout, cheap to decode
MIN_SHARE = 0.25       # of the above-chance accuracy a mirror must lose to count as a handedness
MIN_SIGMAS = 3.0       # ... and the loss must stand this many standard errors clear of noise
MIN_DROP = 0.15        # ... and be at least this many points of accuracy (digits lose ~0.57, photos 0.02-0.08)


@dataclass(frozen=True)
class MirrorTest:
    """Nearest-class-mean accuracy on held-out thumbnails, as they are and mirrored left to right."""

    accuracy: float
    mirrored: float
    chance: float          # 1 / classes
    images: int            # held-out images scored

    @property
    def handed(self) -> bool:
        """Mirroring clearly costs the classifier: the classes have a left and a right, so flips would mislabel."""
        return clear_loss(self.accuracy, self.mirrored, self.chance, self.images)

    def words(self) -> str:
        return (f"a nearest-class-mean test on {self.images} training images scores {self.accuracy:.0%} as they are "
                f"and {self.mirrored:.0%} mirrored (chance {self.chance:.0%})")


def clear_loss(accuracy: float, changed: float, chance: float, images: int) -> bool:
    """A change to the images (a mirror, a crop) clearly costs the classifier: at least MIN_DROP points, a
    MIN_SHARE of what it reads above chance, and MIN_SIGMAS standard errors clear of noise. Pure."""
    drop = accuracy - changed
    noise = math.sqrt((accuracy * (1 - accuracy) + changed * (1 - changed)) / max(1, images))
    return drop > MIN_SIGMAS * noise and drop > MIN_SHARE * max(0.0, accuracy - chance) and drop >= MIN_DROP


def class_means(thumbs: np.ndarray, labels: np.ndarray, classes: int) -> np.ndarray:
    """classes x pixels: each class's mean thumbnail, rows normalised (a class without images stays zero)."""
    x = normalised(thumbs.reshape(len(thumbs), -1).astype(np.float64))
    means = np.zeros((classes, x.shape[1]))
    for c in range(classes):
        members = x[labels == c]
        if len(members):
            means[c] = members.mean(0)
    return normalised(means)


def nearest_mean_accuracy(means: np.ndarray, thumbs: np.ndarray, labels: np.ndarray) -> float:
    """Share of `thumbs` whose nearest class mean (cosine) is their own class; 0.0 for none."""
    if not len(thumbs):
        return 0.0
    x = normalised(thumbs.reshape(len(thumbs), -1).astype(np.float64))
    return float(np.mean(np.argmax(x @ means.T, 1) == labels))


def mirror_test(thumbs: np.ndarray, labels: np.ndarray, classes: int) -> MirrorTest:
    """`thumbs`: N x H x W grey images (any numeric dtype), `labels`: N class indices. Even positions give the
    class means, odd ones are scored. Pure. Fewer than two images: no evidence either way (the loaders will say
    what is wrong with the files)."""
    if len(thumbs) < 2:
        return MirrorTest(0.0, 0.0, 1.0 / max(1, classes), 0)
    fit = np.arange(len(labels)) % 2 == 0
    means = class_means(thumbs[fit], labels[fit], classes)
    held, truth = thumbs[~fit], labels[~fit]
    return MirrorTest(nearest_mean_accuracy(means, held, truth), nearest_mean_accuracy(means, held[:, :, ::-1], truth),
                      1.0 / max(1, classes), len(held))


def normalised(x: np.ndarray) -> np.ndarray:
    """Each row centred and scaled to unit length: brightness and contrast do not decide the class."""
    x = x - x.mean(1, keepdims=True)
    return x / (np.linalg.norm(x, axis=1, keepdims=True) + 1e-9)


def shrunk(thumbs: np.ndarray) -> np.ndarray:
    """N x H x W -> N x H/2 x W/2 by 2 x 2 means (one 32 px sample serves both checks: 16 px for the mirror)."""
    n, h, w = thumbs.shape
    return thumbs[:, :h // 2 * 2, :w // 2 * 2].astype(np.float64).reshape(n, h // 2, 2, w // 2, 2).mean((2, 4))


@dataclass(frozen=True)
class ThumbSample:
    """A random sample of the training images as grey thumbnails, with their labels and their sizes as stored."""

    thumbs: np.ndarray            # N x size x size
    labels: np.ndarray            # N class indices
    sides: tuple[int, ...] = ()   # each image's shorter side in the file, pixels (the upscaling check reads them)


def sample_thumbs(samples: Sequence[tuple[Any, int]], *, seed: int = 0, n: int = SAMPLE, size: int = THUMB,
                  open_source: Callable[[Any], Any] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Grey `size` x `size` thumbnails of a random sample of (source, class) pairs -> (thumbnails, labels)."""
    sample = sample_images(samples, seed=seed, n=n, size=size, open_source=open_source)
    return sample.thumbs, sample.labels


def sample_images(samples: Sequence[tuple[Any, int]], *, seed: int = 0, n: int = SAMPLE, size: int = THUMB,
                  open_source: Callable[[Any], Any] | None = None) -> ThumbSample:
    """Grey `size` x `size` thumbnails of a random sample of (source, class) pairs, with each one's shorter side
    as stored (read from the header PIL opens anyway); unreadable files are left out (the loaders count them
    later). A source is a path, or whatever `open_source` turns into a path or a binary file for PIL (a prepared
    set's shard member)."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    pick = rng.choice(len(samples), size=min(n, len(samples)), replace=False) if samples else np.empty(0, int)
    thumbs, labels, sides = [], [], []
    for i in pick:
        path, label = samples[int(i)]
        try:
            with Image.open(open_source(path) if open_source else path) as image:
                side = min(image.size)  # before draft(), which shrinks a JPEG's size to what it will decode
                image.draft("L", (size * 2, size * 2))  # JPEG: decode at a fraction of the size
                thumbs.append(np.asarray(image.convert("L").resize((size, size), Image.Resampling.BILINEAR)))
        except (OSError, ValueError):
            continue
        labels.append(label)
        sides.append(side)
    if not thumbs:
        return ThumbSample(np.zeros((0, size, size)), np.zeros(0, dtype=int))
    return ThumbSample(np.stack(thumbs), np.asarray(labels), tuple(sides))
