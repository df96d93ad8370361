"""A time budget's reserve for the end of the run before any epoch ended: the final validation, timed on the
2-batch sanity validation and scaled to the whole set (then the first epoch's real validation replaces it).

The sanity pass's first batch carries costs no later validation pays: on a GPU, CUDA and cuDNN start-up,
`cudnn.benchmark` autotuning for the evaluation shapes and, with compile on, the evaluation graph's compilation
(seconds to minutes: scaled to a whole validation they left no time to train). So only the batches after the first
are timed: from when the pass asks for its second batch (the first one's host work, where autotuning and compiling
happen, is done by then) to the end of the pass, which waits for the device. A validation also re-estimates the
batch-norm statistics first (norm_stats.py: a forward pass over up to `optim.precise_bn_images` training images),
which the sanity pass has nothing yet to do: those images are priced at the same seconds per image. And the reserve
is capped at a share of the time left, so a guess cannot leave a plan of 0 steps.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sized
from typing import Any, TypeVar

from fasttrain.train.loop.batches import unpack_batch

T = TypeVar("T")

MAX_START_SHARE = 0.5   # the reserve before an epoch was measured: at most this share of the time left
SANITY_BATCHES = 2      # batches the sanity validation runs (Trainer.fit)


def capped_reserve(end_s: float, left_s: float) -> float:
    """The reserve for the end (seconds), at most MAX_START_SHARE of the `left_s` seconds left. Pure."""
    return max(0.0, min(end_s, MAX_START_SHARE * max(0.0, left_s)))


def whole_validation_s(asked: list[float], done: float, batches: int, pass_s: float, val_batches: int, *,
                       batch_images: int = 0, reestimate_images: int = 0) -> float:
    """Seconds a validation of `val_batches` batches takes, from a sanity pass that ran `batches` batches: `asked`
    the clock when the pass asked for each batch, `done` when it ended, `pass_s` its whole time (the figure for a
    pass of one batch, which has nothing after its first); plus the batch-norm re-estimate's `reestimate_images`
    at the seconds per image of its batches of `batch_images`. Pure."""
    per_batch = (done - asked[1]) / (batches - 1) if batches >= 2 and len(asked) >= 2 else pass_s / max(1, batches)
    per_image = per_batch / batch_images if batch_images > 0 else 0.0
    return max(0.0, per_batch * max(1, val_batches) + per_image * max(0, reestimate_images))


class SanityTiming:
    """Records when the sanity validation asks for each batch (wrap()), then prices a whole validation."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.asked: list[float] = []
        self.handed = 0                        # batches handed to the pass (one more than it ran: its stop)
        self.images: list[int] = []            # images in each batch handed
        self._marked: Generator[Any, None, None] | None = None

    def wrap(self, loader: Iterable[T]) -> Iterator[T]:
        """`loader`, with the clock read each time the pass asks for a batch."""
        self._marked = self._mark(loader)
        return self._marked

    def _mark(self, loader: Iterable[T]) -> Generator[T, None, None]:
        it = iter(loader)
        while True:
            self.asked.append(self.clock())
            try:
                item = next(it)
            except StopIteration:
                return
            self.handed += 1
            self.images.append(len(unpack_batch(item)[1]))  # type: ignore[arg-type]  # a batch as evaluate takes it
            yield item

    def reserve_s(self, sanity: dict[str, Any] | None, val_loader: Iterable[Any] | None,
                  reestimate_images: int = 0) -> float:
        """Right after the sanity pass: the seconds a whole validation of `val_loader` takes, its batch-norm
        re-estimate over `reestimate_images` included (0 without a validation)."""
        done = self.clock()
        if self._marked is not None:
            self._marked.close()  # the loader's iterator (and any workers) stops now, not when collected
        if not sanity or not isinstance(val_loader, Sized):
            return 0.0
        ran = min(self.handed, SANITY_BATCHES)
        return whole_validation_s(self.asked, done, ran, float(sanity.get("val_s") or 0.0), len(val_loader),
                                  batch_images=self.images[ran - 1] if ran else 0, reestimate_images=reestimate_images)
