"""What a Trainer is told besides its engine: logging pace, non-finite policy, saves, patience, hooks, budget."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fasttrain.train.loop.budget import BudgetPace
    from fasttrain.train.state.run_state import RunExtras


@dataclass(frozen=True)
class LoopOptions:
    log_interval_s: float = 1.0       # seconds between logged steps (a logged step reads the device back)
    on_nan: str = "stop"              # "stop": MAX_NONFINITE_STREAK bad steps in a row end the run; "skip"
    save_every_s: float | None = None  # a mid-epoch checkpoint this often (seconds); None: at epoch ends only
    patience: int | None = None       # epochs without a better val acc@1 before stopping early
    before_step: Callable[[int], None] | None = None  # called with the batch index (the step A/Bs: threads, precision)
    extras: Callable[[int], RunExtras] | None = None  # the run's part of a checkpoint (arg: batches this pass)
    launched_at: float | None = None  # time.time() when the process started: each epoch row's elapsed_s counts from it
    budget: BudgetPace | None = None  # a time budget: when training stops, where the LR schedule ends
    test_flip: bool = False           # validate each image with its mirror image (augment.test_flip, flips valid)
    precise_bn_images: int = 0        # batch-norm statistics re-estimated on this many training images (norm_stats.py)
