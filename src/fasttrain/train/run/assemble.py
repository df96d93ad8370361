"""What a run trains with, put together: the step engine and the Trainer around it (resumed from its checkpoint
when there is one), its loop options, the A/Bs of its first steps, and what it adds to each checkpoint.

RunParts holds what execute.py opened (loaders, run folder, run log, telemetry, the budget); make_trainer()
builds the StepEngine and the Trainer from it. RunParts.checkpoint_extras() is the run's part of each checkpoint
(state/run_state.py RunExtras: the plan, the run's own arguments, the data order, the profile, the budget used,
the run's clock), which the Trainer's snapshot (loop/trainer_state.py) asks for at each write.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.train.run.run_clock import RunClock
from fasttrain.train.state.run_state import RESUMED_FIELDS, RunExtras
from fasttrain.train.types import Prepared, TrainArgs

if TYPE_CHECKING:
    import torch

    from fasttrain.datasets.loaders import DecodedLoader, Loader
    from fasttrain.datasets.sampler import EpochSampler
    from fasttrain.telemetry.recorder import Telemetry
    from fasttrain.train.loop.budget import TimeBudget
    from fasttrain.train.loop.events import TrainListener
    from fasttrain.train.loop.step import StepEngine
    from fasttrain.train.loop.trainer import Trainer
    from fasttrain.train.parallel.ddp import DistContext
    from fasttrain.train.run.opening import TrainLoader
    from fasttrain.train.run.runlog import RunLog
    from fasttrain.train.signals.lifecycle import GracefulStop
    from fasttrain.train.trial.thread_follow import FollowFreeCores

BUILT_IN_DATA = ("shapes", "synthetic")   # --data names that are not folders


@dataclass
class RunParts:
    """What one run trains with and writes to, beside the Trainer."""

    prep: Prepared
    train_loader: TrainLoader
    val_loader: Loader | DecodedLoader | None
    epoch_sampler: EpochSampler | None  # None for synthetic data (no order to keep)
    batches: int                        # loader batches in a whole epoch (before a resumed sampler shortens a pass)
    dist: DistContext | None            # in a torchrun worker
    run_dir: Path
    runlog: RunLog | None               # rank 0 only
    telemetry: Telemetry | None         # rank 0 only
    forecast: dict[str, Any] | None
    started: float                      # perf_counter() when training was about to start
    clock: RunClock                     # the run's clock: from this command's start, or a resumed one's
    tuning: dict[str, Any] = field(default_factory=dict)  # the tuning trial's findings (trial/tune.py)
    budget: TimeBudget | None = None    # --time-budget, --deadline or --max-cost
    budget_source: str | None = None    # which of them, in words
    first_step_s: float | None = None   # the forecast's seconds per loader batch (a budget's first plan)
    threads: FollowFreeCores | None = None  # compute threads that follow the free cores (set by make_trainer)
    saved: RunExtras = field(init=False)  # what every checkpoint repeats: plan, arguments, profile

    def __post_init__(self) -> None:
        profile = self.prep.resolved.profile.model_dump(mode="json")
        self.saved = RunExtras(self.prep.plan.to_dict(), args_to_save(self.prep.args), profile=profile)

    def checkpoint_extras(self, consumed_batches: int) -> RunExtras:
        """The run's part of a checkpoint now; `consumed_batches`: loader batches trained in this pass (the
        sampler's position in the epoch's order)."""
        sampler, batch = self.epoch_sampler, self.prep.plan.batch_size
        order = sampler.state_dict(consumed=consumed_batches * batch) if sampler is not None else None
        used = self.budget.used_s() if self.budget is not None else None
        return RunExtras(self.saved.plan, self.saved.args, order, self.saved.profile, used, self.clock.now_s(),
                         time.time())


def args_to_save(args: TrainArgs) -> dict[str, Any]:
    """The run's own arguments for a later --resume; a profile file or data folder given by a relative
    path is stored absolute, so the resume works from any directory."""
    saved = {k: v for k, v in asdict(args).items() if k in RESUMED_FIELDS}
    profile, data = saved.get("profile"), saved.get("data")
    if isinstance(profile, str) and profile.endswith((".yaml", ".yml")) and Path(profile).is_file():
        saved["profile"] = str(Path(profile).resolve())
    if isinstance(data, str) and data not in BUILT_IN_DATA and ":" not in data and Path(data).is_dir():
        saved["data"] = str(Path(data).resolve())
    return saved


def make_trainer(run: RunParts, model: torch.nn.Module, listener: TrainListener, stop: GracefulStop) -> Trainer:
    """The step engine and the Trainer for this run, resumed from its checkpoint when there is one."""
    from fasttrain.datasets.transforms import make_mixup
    from fasttrain.train.loop.budget import BudgetPace
    from fasttrain.train.loop.events import Collaborators
    from fasttrain.train.loop.step import StepEngine
    from fasttrain.train.loop.trainer import LoopOptions, Trainer
    from fasttrain.train.run.export import checkpoint_policy
    from fasttrain.train.setup.plan_view import must_know

    prep, args, plan = run.prep, run.prep.args, run.prep.plan
    profile, bundle = prep.resolved.profile, prep.bundle
    engine = StepEngine.build(plan, profile.optim, model, batches_per_epoch=run.batches,
                              activation_checkpointing=profile.speed.activation_checkpointing,
                              mixup=make_mixup(profile.optim, bundle.num_classes) if bundle.kind != "custom" else None,
                              dist=run.dist)
    accumulation = max(1, plan.accumulation_steps)
    steps_per_epoch = math.ceil(run.batches / accumulation)
    pace = BudgetPace(run.budget, engine.schedule, steps_per_epoch,
                      first_step_s=run.first_step_s * accumulation if run.first_step_s else None,
                      max_steps=args.epochs * steps_per_epoch if args.epochs else None, dist=run.dist,
                      reestimate_images=profile.optim.precise_bn_images) \
        if run.budget is not None else None
    options = LoopOptions(budget=pace, on_nan=args.on_nan,
                          save_every_s=args.save_every_minutes * 60 if args.save_every_minutes else None,
                          patience=profile.optim.early_stopping_patience, extras=run.checkpoint_extras,
                          launched_at=run.clock.origin, test_flip=profile.augment.validates_mirrored,
                          precise_bn_images=profile.optim.precise_bn_images,
                          before_step=_step_abs(run, engine, listener, steps_per_epoch))
    collaborators = Collaborators(telemetry=run.telemetry, dashboard=listener, runlog=run.runlog, bad=bundle.bad,
                                  checkpoints=checkpoint_policy(prep, run.run_dir) if prep.is_main else None)
    trainer = Trainer(engine, collaborators=collaborators, options=options, stop=stop, dist=run.dist)
    if prep.resume is not None:
        trainer.restore(prep.resume)
        at = prep.resume.state.position
        listener.on_message(f"resumed from {prep.resume.path} at epoch {at.epoch + 1}, batch {at.batch}")
    for note in trainer.notes:
        if args.verbose or must_know(note):
            listener.on_message(f"note: {note}")
    return trainer


def _step_abs(run: RunParts, engine: StepEngine, listener: TrainListener,
              steps_per_epoch: int) -> Callable[[int], None] | None:
    """The A/Bs the run's first steps make (compute threads, CPU precision), each only where wanted, then the
    compute threads that follow the free cores (run.threads); none under DDP (the ranks would each pick their
    own, and give way to each other)."""
    from fasttrain.train.trial import precision_ab, thread_ab, thread_follow
    from fasttrain.train.trial.step_ab import in_turn

    if run.dist is not None:
        return None
    planned = None if run.budget is not None else run.prep.resolved.profile.optim.epochs * steps_per_epoch
    run.threads = thread_follow.hook(run.prep, run.telemetry, listener.on_message)
    return in_turn(thread_ab.hook(run.prep, run.tuning, listener.on_message),
                   precision_ab.hook(run.prep, run.tuning, engine.precision, listener.on_message,
                                     planned_steps=planned),
                   run.threads)
