"""A loss that runs away: the rule that turns a diverging run into a failed job (exit 1), not a quiet success.

The non-finite guard (precision.py) catches NaN and Inf; a loss can also climb and stay finite (train loss
5.4 -> 14.8 on 3 classes, val loss 2,014 -> 481,525: issue 25). Pure rules over the epoch rows recorded so far
(FitProgress.history: "train_loss", "val_loss"), tested on recorded series; the trainer calls check() once at
each epoch end.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from fasttrain.core.errors import JobFailed
from fasttrain.core.format import fmt_number
from fasttrain.train.loop.epoch_row import EpochRow

# The latest epoch's mean train loss above this many times the lowest so far, *and* above the first epoch's (about
# the untrained model's loss), is a climb no schedule explains. Near convergence 0.01 -> 0.03 is noise, which the
# second condition leaves alone; mixup or label smoothing raise the level, not the trend. The validation loss alone
# decides nothing: on a small set it swings by orders of magnitude near zero (1e-5 -> 0.6 at 100% -> 67% acc@1,
# measured here) and overfitting raises it while training is sound; it is named beside a runaway train loss.
TRAIN_RUNAWAY = 2.0


def _series(history: Sequence[EpochRow], loss: Callable[[EpochRow], float | None]) -> list[tuple[int, float]]:
    """(epoch, loss) of every row with a number for that `loss`."""
    return [(row.epoch or i + 1, float(value)) for i, row in enumerate(history)
            if isinstance(value := loss(row), (int, float))]


def _rise(series: list[tuple[int, float]], label: str) -> str:
    """`val loss 2,014 (epoch 1) -> 481,525 (epoch 2)`: from the lowest before the last to the last."""
    (low_epoch, low), (last_epoch, last) = min(series[:-1], key=lambda pair: pair[1]), series[-1]
    times = f", {last / low:.1f}x" if low > 0 else ""
    return f"{label} {fmt_number(low)} (epoch {low_epoch}) -> {fmt_number(last)} (epoch {last_epoch}){times}"


def runaway(history: Sequence[EpochRow]) -> str | None:
    """Why the losses recorded so far show a run diverging, or None. Pure."""
    train = _series(history, lambda row: row.train_loss)
    if len(train) < 2:
        return None
    first, last, low = train[0][1], train[-1][1], min(value for _, value in train[:-1])
    if not (last > TRAIN_RUNAWAY * max(low, 0.0) and last > first and last > 0):
        return None
    why = _rise(train, "train loss")
    val = _series(history, lambda row: row.val_loss)
    if len(val) >= 2 and val[-1][1] > min(value for _, value in val[:-1]):
        why += "; " + _rise(val, "val loss")
    return why


def check(history: Sequence[EpochRow], last_good: Path | None) -> None:
    """Raise JobFailed (exit 1) with one line when runaway() finds the run diverging."""
    why = runaway(history)
    if why is None:
        return
    kept = f"; the last checkpoint is {last_good}" if last_good is not None else ""
    raise JobFailed(f"training diverged: {why}; lower optim.base_lr (--set optim.base_lr=...) or lengthen "
                    f"optim.warmup_epochs, and check the data's labels{kept}")
