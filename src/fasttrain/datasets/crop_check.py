"""How small a random crop may be for this data: measured on the data itself, beside the flip check (~0.1 s).

A random-resized crop is an augmentation only while the crop still shows its class. In a photograph of texture
or of an object in a scene, a crop of 60% of the area still does; in a small image whose class fills the frame
(scikit-learn's digits: 8 x 8 pixels upscaled) it cuts a 7's bar or a 9's loop away. Over seeds 0-5 on digits,
`[0.6, 1.0]` reached 97% at epochs 4/3/4/4/3/3 and the crop this check picked (70%; 80% for seed 5) at
4/3/3/3/4/3, final accuracy unchanged (docs/benchmarks.md, "Recipe": a small gain, within the seeds' spread;
the check is there to choose safely). The test is the flip check's classifier (flip_check.py: nearest class
mean over grey thumbnails, class means from one half of the sample): the other half scored whole and as random
square crops of each candidate area, resized back. A crop scale whose crops clearly cost it
(flip_check.clear_loss: 15 points, a quarter of what it reads above chance, 3 standard errors) is raised to the
smallest candidate that does not, and never above 70% of the area (CANDIDATES: this classifier overrates what a
crop costs a CNN). Digits: 88-91% whole, 70-73% at 0.7, 53-58% at 0.6;
photographs: 20-25% at every area (nothing to lose). Where the classifier reads nothing (the built-in shapes:
13-15%, chance 11%) there is no evidence, and the preset's crop stays.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fasttrain.datasets.flip_check import class_means, clear_loss, nearest_mean_accuracy, shrunk

# The area a crop is raised to, at most. 80% and 90% were candidates too, until a CNN's time to accuracy said that
# this classifier overrates what a crop costs: on 4,000 MNIST digits (it reads 77% whole, 33% at 60%, so it picked
# 80%) resnet18 reached 97% at epochs 3/5/3 (seeds 1-3) with 80%, 2/3/2 with 70% and 2/3/2 with 60%; on
# scikit-learn's digits 80% took 21 epochs over six seeds, 70% 20 and 60% 21 (docs/benchmarks.md, "Recipe").
CANDIDATES = (0.7,)


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
        area above it that does not, or the largest tried when every one does (a gentle crop still beats none:
        MNIST without crops ended at 0.963-0.968 against 0.979). Pure."""
        if not self.loses(asked):
            return asked
        above = [a for a, _ in self.cropped if a > asked]
        return next((a for a in above if not self.loses(a)), above[-1] if above else asked)

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
    return CropTest(nearest_mean_accuracy(means, small[~fit], truth), scored, chance, len(held))


def _crops(thumbs: np.ndarray, area: float, corners: np.ndarray) -> np.ndarray:
    """One square crop of `area` of each image, resized back to the full side (bilinear, PIL's)."""
    from PIL import Image

    n, side, _ = thumbs.shape
    cut = max(2, round(side * area ** 0.5))
    out = np.empty(thumbs.shape, dtype=np.float64)
    for i in range(n):
        y, x = (corners[i] * (side - cut + 1)).astype(int)
        piece = Image.fromarray(np.ascontiguousarray(thumbs[i, y:y + cut, x:x + cut]).astype(np.uint8))
        out[i] = np.asarray(piece.resize((side, side), Image.Resampling.BILINEAR), dtype=np.float64)
    return out
