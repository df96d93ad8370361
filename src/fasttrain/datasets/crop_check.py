"""How small a random crop may be for this data: measured on the data itself, beside the flip check (~0.1 s).

A random-resized crop is an augmentation only while the crop still shows its class. In a photograph of texture
or of an object in a scene, a crop of 60% of the area still does; in a small image whose class fills the frame
(scikit-learn's digits: 8 x 8 pixels upscaled) it cuts a 7's bar or a 9's loop away. Over seeds 0-5 on digits,
`[0.6, 1.0]` reached 97% at epochs 4/3/4/4/3/3 and the crop this check picks (70%; 80% for seed 5) at
4/3/3/3/4/3, final accuracy unchanged (docs/benchmarks.md, "Recipe": a small gain, within the seeds' spread;
the check is there to choose safely). The test is the flip check's classifier (flip_check.py: nearest class
mean over grey thumbnails, class means from one half of the sample): the other half scored whole and as random
square crops of each candidate area, resized back. A crop scale whose crops clearly cost it
(flip_check.clear_loss: 15 points, a quarter of what it reads above chance, 3 standard errors) is raised to the
smallest candidate that does not. Digits: 88-91% whole, 82-85% at 0.8 of the area, 70-73% at 0.7, 53-58% at 0.6;
photographs: 20-25% at every area (nothing to lose). Where the classifier reads nothing (the built-in shapes:
13-15%, chance 11%) there is no evidence, and the preset's crop stays.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttrain.datasets.flip_check import class_means, clear_loss, nearest_mean_accuracy, shrunk

CANDIDATES = (0.7, 0.8, 0.9)   # areas tried above the preset's own minimum, smallest first; 1.0 = no crop


@dataclass(frozen=True)
class CropTest:
    """Nearest-class-mean accuracy on held-out thumbnails, whole and as random crops of each area tried."""

    accuracy: float
    cropped: tuple[tuple[float, float], ...]   # (area share, accuracy on crops of that area), smallest area first
    chance: float
    images: int

    def loses(self, area: float) -> bool:
        """Crops of this share of the area clearly cost the classifier (an untried area: no evidence)."""
        scored = dict(self.cropped).get(area)
        return scored is not None and clear_loss(self.accuracy, scored, self.chance, self.images)

    def smallest_safe(self, asked: float) -> float:
        """The crop's minimum area: `asked` unless its crops clearly cost the classifier, else the smallest tried
        area above it that does not (1.0, no crop, when every one does). Pure."""
        if not self.loses(asked):
            return asked
        return next((a for a, _ in self.cropped if a > asked and not self.loses(a)), 1.0)

    def words(self, area: float) -> str:
        return (f"a nearest-class-mean test on {self.images} training images scores {self.accuracy:.0%} whole and "
                f"{dict(self.cropped)[area]:.0%} on crops of {area:.0%} of the area (chance {self.chance:.0%})")


def crop_test(thumbs: np.ndarray, labels: np.ndarray, classes: int, asked: float, *, seed: int = 0) -> CropTest:
    """`thumbs`: N x S x S grey images (S even, 32 in a run), `labels`: N class indices; `asked`: the profile's
    minimum crop area. Class means from the even positions at S/2; the odd ones scored whole and as one random
    square crop each of every area tried (the same positions for every area), shrunk to S/2. Pure."""
    areas = sorted({asked, *(a for a in CANDIDATES if a > asked)})
    chance = 1.0 / max(1, classes)
    if len(thumbs) < 2:
        return CropTest(0.0, tuple((a, 0.0) for a in areas), chance, 0)
    fit = np.arange(len(labels)) % 2 == 0
    small = shrunk(thumbs)
    means = class_means(small[fit], labels[fit], classes)
    held, truth = thumbs[~fit], labels[~fit]
    corners = np.random.default_rng(seed).random((len(held), 2))   # where each crop sits, as a share of the slack
    scored = tuple((a, nearest_mean_accuracy(means, shrunk(_crops(held, a, corners)), truth)) for a in areas)
    return CropTest(nearest_mean_accuracy(means, small[~fit], truth), scored, chance, int(len(held)))


def _crops(thumbs: np.ndarray, area: float, corners: np.ndarray) -> np.ndarray:
    """One square crop of `area` of each image, resized back to the full side (bilinear, PIL's)."""
    from PIL import Image

    n, side, _ = thumbs.shape
    cut = max(2, int(round(side * area ** 0.5)))
    out = np.empty(thumbs.shape, dtype=np.float64)
    for i in range(n):
        y, x = (corners[i] * (side - cut + 1)).astype(int)
        piece = Image.fromarray(np.ascontiguousarray(thumbs[i, y:y + cut, x:x + cut]).astype(np.uint8))
        out[i] = np.asarray(piece.resize((side, side), Image.BILINEAR), dtype=np.float64)
    return out
