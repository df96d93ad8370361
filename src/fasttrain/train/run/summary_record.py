"""A run's summary as one typed record: what summary.json holds and `fasttrain train --json` prints. `to_json()` is
the one place that writes it, `from_json()` the one that reads it back (`fasttrain report`, the API, a summary of an
earlier fasttrain: keys it lacks keep their defaults, keys this one does not know are kept in `extra`).

Frozen dataclasses rather than Pydantic models: fasttrain builds these itself (nothing to validate), they cost
nothing to import or build, and to_json() keeps the exact keys summary.json had before they were typed (keys left
out while unset, e.g. the stop's keys of a run that was not stopped, are left out here too)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from fasttrain.core.json_record import OPTIONAL, nested, record_from_json, record_json
from fasttrain.train.loop.epoch_row import EpochRow
from fasttrain.train.run.summary_parts import (
    BudgetReport,
    ClassScore,
    ConfusedPair,
    ForecastFigures,
    InitRecord,
    Milestone,
    ResumedClock,
    StoppedAt,
    SubmissionInputs,
)

# Keys written only for a run a stop request ended (summary.interrupted_report).
STOP_KEYS = ("interrupted", "exit_code", "stopped_at", "checkpoint_written", "resume_command", "stop_message")
# Keys of the per-class report (loop/class_tally.py class_report): all of them with a confusion matrix; per_class,
# confused and per_class_note when there were too many classes to keep one; none without validation.
CLASS_KEYS = ("per_class", "confused", "confusion_matrix", "per_class_epoch", "per_class_basis")


@dataclass(frozen=True)
class RunSummary:
    """A finished or stopped run. Seconds are wall-clock; accuracies 0..1; paths as strings, as the JSON has them."""

    run_dir: str = ""
    profile: str | None = None
    model: str = ""
    data: str | None = None
    device: str = ""
    precision: str = ""                    # what ran: the precision A/B may have switched the plan's
    world_size: int = 1
    torch: str = ""
    seed: int | None = None
    epochs_run: int | None = None          # a resumed run's earlier epochs included (None: not recorded)
    stopped_early: bool = False
    final_val_acc1: float | None = None
    final_val_acc5: float | None = None
    final_val_loss: float | None = None
    final_train_loss: float | None = None
    best_val_acc1: float | None = None
    best_epoch: int | None = None
    train_images_per_s: float | None = None  # this session's training passes
    wall_s: float | None = None            # this session, from the run's start (None: not recorded)
    fit_s: float | None = None
    checkpoint_last: str | None = None
    checkpoint_best: str | None = None
    checkpoint_bytes: Mapping[str, int] = field(default_factory=dict)  # on disk, by file name
    model_files: str | None = None
    milestones: tuple[Milestone, ...] = field(default=(), metadata=nested(Milestone))
    init: InitRecord = field(default_factory=InitRecord, metadata=nested(InitRecord))
    submission_inputs: SubmissionInputs | None = field(default=None, metadata=nested(SubmissionInputs))
    per_class: tuple[ClassScore, ...] | None = field(default=None, metadata=nested(ClassScore))
    confused: tuple[ConfusedPair, ...] | None = field(default=None, metadata=nested(ConfusedPair))
    confusion_matrix: tuple[list[int], ...] | None = None  # [true][predicted] counts
    per_class_epoch: int | None = None
    per_class_basis: str | None = None     # "best" or "last"
    per_class_note: str | None = None      # why there is no per-class report
    sanity_check: Mapping[str, Any] | None = None  # the 2-batch validation before training
    notes: tuple[str, ...] = ()
    plan_notes: tuple[str, ...] = ()
    history: tuple[EpochRow, ...] = field(default=(), metadata=nested(EpochRow))
    bad_files: int = 0
    bad_file_paths: tuple[str, ...] = ()   # the first 20
    oom_backoffs: tuple[Mapping[str, Any], ...] = ()
    # Compute threads given up to (and taken back from) other processes: elapsed_s, batch, threads, others_cores
    thread_changes: tuple[Mapping[str, Any], ...] = ()
    micro_batch: int | None = None
    accumulation_steps: int = 1
    effective_batch: int = 0
    nonfinite_steps: int = 0
    checkpoint_errors: tuple[str, ...] = ()
    resumed_from: str | None = None
    last_good_checkpoint: str | None = None
    forecast: ForecastFigures | None = field(default=None, metadata=nested(ForecastFigures))
    resumed_clock: ResumedClock | None = field(default=None, metadata=nested(ResumedClock))
    time_budget: BudgetReport | None = field(default=None, metadata={**nested(BudgetReport), **OPTIONAL})
    verdict: str | None = None
    interrupted: str | None = None         # the signal of a stop request ("SIGTERM"); None: not stopped
    exit_code: int = 0
    stopped_at: StoppedAt | None = field(default=None, metadata=nested(StoppedAt))
    checkpoint_written: str | None = None
    resume_command: str | None = None      # None for a stopped run without last.pt
    stop_message: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # keys this fasttrain does not know (kept as read)

    def to_json(self) -> dict[str, Any]:
        """summary.json's object (what `--json` prints)."""
        out = record_json(self)
        gone = [] if self.interrupted is not None else list(STOP_KEYS)
        if self.per_class_note is None:
            gone.append("per_class_note")
            gone += [] if self.per_class_basis is not None else CLASS_KEYS
        elif self.per_class_basis is None:
            gone += CLASS_KEYS[2:]
        for key in gone:
            out.pop(key, None)
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunSummary:
        return record_from_json(cls, data)

    @property
    def stopped(self) -> bool:
        """A stop request (a signal) ended the run: it can be resumed where it stopped."""
        return self.interrupted is not None
