"""Are the images trained far above the size they are stored at? Read from the sample the flip and crop checks
open anyway (datasets/augment_check.py): no file is opened for it.

A GPU preset trains at 224 px (kaggle-t4, aws-a10g); on Fashion-MNIST's 28 px images that is 64x the pixels of each
image, all of them interpolated: the step pays for every one (a convolution's work grows with the pixels), and the
first epoch of a run a newcomer started on a CPU took minutes where 32 px takes seconds (issue 43). The plan says
so, with what it costs and the size that trains near the images' own.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

UPSCALE_MIN = 2.0    # the trained side over the stored side from which the plan says so (4x the pixels)
SIZE_STEP = 16       # the suggested --image-size: the stored side rounded up to a multiple of this ...
MIN_SUGGESTED = 32   # ... and no smaller (ResNets halve the side five times)


def stored_side(sides: Sequence[int]) -> int | None:
    """The images' shorter side as stored: the sample's median (one odd file does not decide). Pure."""
    return int(statistics.median(sides)) if sides else None


def suggested_size(side: int) -> int:
    """The --image-size that trains near `side`: it rounded up to a multiple of SIZE_STEP, at least MIN_SUGGESTED."""
    return max(MIN_SUGGESTED, math.ceil(side / SIZE_STEP) * SIZE_STEP)


def upscale_note(sides: Sequence[int], image_size: int) -> str | None:
    """The plan's note when `image_size` is at least UPSCALE_MIN x the images' stored side, else None. Pure."""
    side = stored_side(sides)
    if not side or image_size < UPSCALE_MIN * side:
        return None
    size = suggested_size(side)
    pixels, compute = (image_size / side) ** 2, (image_size / size) ** 2
    cost = f", about {compute:.0f}x the compute of --image-size {size}" if size < image_size else ""
    return (f"upscaling: the images are {side} px, trained at {image_size} px: {pixels:.0f}x the pixels of each "
            f"image{cost}; --image-size {size} trains near their own size")
