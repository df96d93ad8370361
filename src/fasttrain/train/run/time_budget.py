"""The run's time budget (--time-budget, --deadline, --max-cost): opened from its flags, with what a resumed run has
left, and the epochs it buys: for the display's progress (the loop re-plans as it measures) and for the loop,
which the budget ends rather than a count of epochs."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fasttrain.train.types import Prepared

if TYPE_CHECKING:
    from fasttrain.train.loop.budget import TimeBudget

EPOCH_CAP = 100_000  # a budgeted run's epochs: the budget ends it, never this


def time_budget(prep: Prepared, launched_at: float) -> tuple[TimeBudget, str] | None:
    """The run's time budget and where it came from, or None. A resume continues a --time-budget or --max-cost
    with what the checkpoint says is left; a --deadline is a clock time, the same for every process."""
    from datetime import datetime

    from fasttrain.train.loop.budget import TimeBudget
    from fasttrain.train.setup.budget_args import budget_seconds
    args = prep.args
    found = budget_seconds(args.time_budget, args.deadline, args.max_cost, prep.resolved.profile,
                           datetime.fromtimestamp(launched_at))
    if found is None:
        return None
    used = prep.resume.state.extras.budget_used_s if prep.resume is not None and args.deadline is None else None
    return TimeBudget(found[0], launched_at, used_before_s=used or 0.0), found[1]


def fit_epochs(prep: Prepared, budget: TimeBudget | None) -> int:
    """The epochs the loop is told to train: the profile's, or under a budget --epochs as a cap (else none)."""
    if budget is None:
        return prep.resolved.profile.optim.epochs
    return prep.args.epochs or EPOCH_CAP


def display_epochs(prep: Prepared, budget: TimeBudget | None, step_s: float | None, batches: int) -> int:
    """The epochs the display counts to: the profile's, or those a budget buys at the forecast's step time
    (`step_s`, seconds per loader batch) over `batches` per epoch, after the epoch a resume continues from (a
    resumed run read `epoch 3/1`)."""
    from fasttrain.train.loop.budget import steps_that_fit

    fallback = prep.resolved.profile.optim.epochs
    if budget is None:
        return fallback
    start_epoch = prep.resume.state.position.epoch if prep.resume is not None else 0
    if not step_s:
        return max(fallback, start_epoch + 1)
    accumulation = max(1, prep.plan.accumulation_steps)
    steps = steps_that_fit(budget.training_left_s(), step_s * accumulation)
    return start_epoch + max(1, math.ceil(steps / max(1, math.ceil(batches / accumulation))))
