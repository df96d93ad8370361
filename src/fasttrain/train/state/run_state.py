"""The run's state: one typed object for everything an exact resume needs, and the one reader of a checkpoint's
fields.

A checkpoint file holds `RunState.to_payload()` (plus what checkpoint.save_atomic adds around it: the format name
and version, the versions of fasttrain and torch, the SHA-256 of the content). `RunState.from_payload()` reads a
payload that checkpoint.load() has already checked (integrity.py: checksum and field types), so nothing else in
the package reads a checkpoint by string key. `Position` is where a run stands, worked out here only.

The payload keys are those of format version 1 (files written before this module existed load unchanged).
No torch here: the tensors inside are carried, never touched.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttrain.train.loop.epoch_row import EpochRow

# The fields of TrainArgs a checkpoint keeps (its "args" entry), so `--resume` without them repeats the run.
RESUMED_FIELDS = ("profile", "model", "data", "epochs", "sets", "pretrained", "weights", "seed", "image_size",
                  "num_classes", "save_every", "strict_data", "on_nan", "save_every_minutes", "batch_size",
                  "time_budget", "deadline", "max_cost")


# StepEngine.state_dict()'s keys (loop/step.py): RunState's fields of the same names, the payload's keys too.
ENGINE_ENTRIES = ("model", "optimizer", "schedule", "scaler", "micro_batch_splits", "oom_events", "ema")


def _whole(value: object) -> int:
    """A recorded whole number, or -1 for a missing or foreign one (so a damaged file ranks last)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


@dataclass(frozen=True, order=True)
class Position:
    """Where a run stands. Ordered by (step, epoch, batch): the furthest run compares largest."""

    step: int    # optimizer steps taken
    epoch: int   # the epoch the run continues in, 0-based (= epochs finished when batch is 0)
    batch: int   # loader batches of that epoch already trained (0: the epoch has not started)

    @classmethod
    def of(cls, payload: Mapping[str, Any]) -> Position:
        """The position recorded in a payload, verified or not (ranking files reads it before verifying one);
        a missing or foreign field reads -1. The step is the schedule's when the file has no `step` of its own."""
        step = payload.get("step")
        schedule = payload.get("schedule")
        if not isinstance(step, int) and isinstance(schedule, Mapping):
            step = schedule.get("step")
        return cls(_whole(step), _whole(payload.get("epoch")), _whole(payload.get("batch_in_epoch")))

    @property
    def finished_epochs(self) -> int:
        return max(self.epoch, 0)


@dataclass
class FitProgress:
    """What the epochs so far found: one row per epoch (oldest first), the best val acc@1 and since when."""

    history: list[EpochRow] = field(default_factory=list)
    best_acc1: float | None = None
    best_epoch: int | None = None      # 1-based epoch of best_acc1
    stale: int = 0                     # epochs since the last new best (patience counts these)

    def add_epoch(self, row: EpochRow) -> bool:
        """Record an epoch's row (its "epoch" counts from 1); -> whether its val acc@1 is a new best. Epochs
        without one count as stale, as epochs that did not improve do."""
        self.history.append(row)
        acc = row.val_acc1
        if acc is not None and (self.best_acc1 is None or acc > self.best_acc1):
            self.best_acc1, self.best_epoch, self.stale = acc, row.epoch, 0
            return True
        self.stale += 1
        return False

    def out_of_patience(self, patience: int | None) -> bool:
        """Early stopping: the last epoch validated and `patience` epochs in a row brought no better acc@1."""
        last = self.history[-1] if self.history else EpochRow()
        return patience is not None and last.val_acc1 is not None and self.stale >= patience

    def to_payload(self) -> dict[str, Any]:
        return {"best_acc1": self.best_acc1, "best_epoch": self.best_epoch, "stale": self.stale,
                "history": [row.to_json() for row in self.history]}

    @classmethod
    def from_payload(cls, fit: Mapping[str, Any] | None) -> FitProgress:
        fit = fit or {}
        return cls([EpochRow.from_json(row) for row in fit.get("history") or []], fit.get("best_acc1"),
                   fit.get("best_epoch"), int(fit.get("stale") or 0))


@dataclass(frozen=True)
class EpochPartial:
    """An epoch's sums up to a mid-epoch checkpoint, over all ranks: a resumed pass carries them on."""

    loss_sum: float = 0.0
    nonfinite: int = 0
    images: int = 0
    seconds: float = 0.0

    def to_payload(self) -> dict[str, Any]:
        return {"loss_sum": self.loss_sum, "nonfinite": self.nonfinite, "images": self.images,
                "seconds": self.seconds}

    @classmethod
    def from_payload(cls, partial: Mapping[str, Any] | None) -> EpochPartial | None:
        if not partial:
            return None
        return cls(float(partial.get("loss_sum", 0.0)), int(partial.get("nonfinite", 0)),
                   int(partial.get("images", 0)), float(partial.get("seconds", 0.0)))


@dataclass(frozen=True)
class RunExtras:
    """What the run (not the loop) adds to each checkpoint: its plan and arguments, the data order, the profile."""

    plan: dict[str, Any] = field(default_factory=dict)  # Plan.to_dict(): a resume checks its batch and world
    args: dict[str, Any] | None = None       # RESUMED_FIELDS of the run's TrainArgs
    sampler: dict[str, Any] | None = None    # datasets.sampler.EpochSampler.state_dict()
    profile: dict[str, Any] | None = None    # the resolved profile (model_dump)
    budget_used_s: float | None = None       # a time budget's seconds used so far (a resume continues the rest)
    clock_s: float | None = None             # seconds on the run's clock at this checkpoint (run/run_clock.py)
    saved_at: float | None = None            # time.time() when it was taken: a resume says how long the stop was


@dataclass
class RunState:
    """Everything an exact resume needs. Tensors stay inside the state dicts; nothing here reads them."""

    model: dict[str, Any]                     # module.state_dict()
    optimizer: dict[str, Any]
    schedule: dict[str, Any]                  # loop.optim.LRSchedule.state_dict()
    position: Position
    scaler: dict[str, Any] | None = None      # fp16's GradScaler; None for bf16 and fp32
    partial: EpochPartial | None = None       # mid-epoch: the epoch's sums so far
    rng: dict[str, Any] | None = None         # this process's RNG states (state.rng.rng_states)
    rng_per_rank: list[Any] | None = None     # every rank's, under DDP (rank order)
    metrics: dict[str, Any] = field(default_factory=dict)     # the epoch's row (epoch checkpoints)
    micro_batch_splits: int = 1               # out-of-memory back-off: micro-batches per loader batch
    oom_events: list[dict[str, Any]] = field(default_factory=list)
    nonfinite_total: int = 0
    ema: dict[str, Any] | None = None         # the moving average of the weights (optim.ema_decay), if any
    fit: FitProgress = field(default_factory=FitProgress)
    extras: RunExtras = field(default_factory=RunExtras)

    def to_payload(self) -> dict[str, Any]:
        """The dict a checkpoint file holds (format version 1's keys)."""
        return {
            "model": self.model, "optimizer": self.optimizer, "scaler": self.scaler, "schedule": self.schedule,
            "epoch": self.position.epoch, "batch_in_epoch": self.position.batch, "step": self.position.step,
            "partial": self.partial.to_payload() if self.partial is not None else None,
            "rng": self.rng, "rng_per_rank": self.rng_per_rank, "plan": self.extras.plan, "metrics": self.metrics,
            "profile": self.extras.profile, "micro_batch_splits": self.micro_batch_splits,
            "oom_events": list(self.oom_events), "nonfinite_total": self.nonfinite_total,
            "fit": self.fit.to_payload(), "args": self.extras.args, "sampler": self.extras.sampler,
            "budget_used_s": self.extras.budget_used_s, "ema": self.ema,
            "clock_s": self.extras.clock_s, "saved_at": self.extras.saved_at,
        }

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> RunState:
        """A payload that checkpoint.load(..., complete=True) verified (every field a resume needs is there
        with its type), as a RunState."""
        return cls(
            model=payload["model"], optimizer=payload["optimizer"], schedule=payload["schedule"],
            position=Position.of(payload), scaler=payload.get("scaler"),
            partial=EpochPartial.from_payload(payload.get("partial")), rng=payload.get("rng"),
            rng_per_rank=payload.get("rng_per_rank"),
            metrics=dict(payload.get("metrics") or {}), micro_batch_splits=int(payload.get("micro_batch_splits") or 1),
            oom_events=list(payload.get("oom_events") or []), nonfinite_total=int(payload.get("nonfinite_total") or 0),
            ema=payload.get("ema"),
            fit=FitProgress.from_payload(payload.get("fit")),
            extras=RunExtras(dict(payload.get("plan") or {}), payload.get("args"), payload.get("sampler"),
                             payload.get("profile"), payload.get("budget_used_s"), payload.get("clock_s"),
                             payload.get("saved_at")),
        )

    def engine_state(self) -> dict[str, Any]:
        """What StepEngine.load_state_dict() takes: the ENGINE_ENTRIES of this state."""
        return {name: getattr(self, name) for name in ENGINE_ENTRIES}

    def saved_split(self) -> tuple[int, int] | None:
        """The (micro-batch, accumulation) the run trained with, when its plan recorded them."""
        batch, accumulation = (_whole(self.extras.plan.get(key)) for key in ("batch_size", "accumulation_steps"))
        return (batch, accumulation) if batch > 0 and accumulation > 0 else None


@dataclass(frozen=True)
class Resume:
    """The checkpoint a run continues from: where the file is and what it holds."""

    path: Path
    state: RunState
