"""The nested parts of a run's summary (summary_record.py) that are read by name: the milestones, the per-class
scores and mistakes, the time budget, the resumed clock, the starting weights, where a stop happened, the forecast
and a competition's inputs. Each is a frozen record written by to_json() and read back by from_json()
(core/json_record.py)."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fasttrain.core.json_record import OPTIONAL, record_from_json, record_json

R = TypeVar("R", bound="JsonRecord")


class JsonRecord:
    """to_json / from_json by the record's fields (core/json_record.py)."""

    def to_json(self) -> dict[str, Any]:
        return record_json(self)

    @classmethod
    def from_json(cls: type[R], data: Mapping[str, Any]) -> R:
        return record_from_json(cls, data)


@dataclass(frozen=True)
class Milestone(JsonRecord):
    """The first epoch that reached a validation acc@1 (summary.MILESTONES), and when."""

    val_acc1: float = 0.0               # the milestone, 0..1
    epoch: int | None = None
    elapsed_s: float | None = None      # from launch to the end of that epoch's validation


@dataclass(frozen=True)
class ClassScore:
    """One class's validation accuracy (None: no validation image of it) and its images; JSON key "class"."""

    name: str = ""
    accuracy: float | None = None
    images: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"class": self.name, "accuracy": self.accuracy, "images": self.images}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ClassScore:
        return cls(str(data.get("class", "")), data.get("accuracy"), int(data.get("images") or 0))


@dataclass(frozen=True)
class ConfusedPair(JsonRecord):
    """A frequent mistake: images of `true` predicted as `predicted`; share of true's validation images."""

    true: str = ""
    predicted: str = ""
    count: int = 0
    share: float = 0.0


@dataclass(frozen=True)
class BudgetReport(JsonRecord):
    """What a time budget bought: seconds budgeted, used and left (negative: over), where it came from
    ("--time-budget", "--deadline 18:00", "--max-cost 2.5 USD"), epochs, replans, the last LR as a share of the peak."""

    budget_s: float | None = None
    used_s: float | None = None
    margin_s: float | None = None
    source: str = ""
    epochs: int = 0
    replans: int = 0
    lr_end_share: float | None = None


@dataclass(frozen=True)
class ResumedClock(JsonRecord):
    """A resumed run's clock, seconds: at the checkpoint, now, and the stop between (None: unknown)."""

    before_s: float = 0.0
    run_s: float | None = None
    stopped_s: float | None = None


@dataclass(frozen=True)
class InitRecord(JsonRecord):
    """Where the starting weights came from: --weights (the file, tensors loaded of all, skipped and missing names),
    a resume's weights, --pretrained's source, or nothing (weights None). Unset keys are left out of the JSON."""

    weights: str | None = None
    file: str | None = field(default=None, metadata=OPTIONAL)
    loaded: int | None = field(default=None, metadata=OPTIONAL)
    of: int | None = field(default=None, metadata=OPTIONAL)
    skipped: tuple[Any, ...] | None = field(default=None, metadata=OPTIONAL)
    missing: tuple[str, ...] | None = field(default=None, metadata=OPTIONAL)
    resumed: bool | None = field(default=None, metadata=OPTIONAL)
    pretrained: str | None = field(default=None, metadata=OPTIONAL)
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StoppedAt(JsonRecord):
    """Where a stop request ended the run: epoch (from 1), batch in it, optimizer step."""

    epoch: int = 0
    batch: int = 0
    step: int = 0


@dataclass(frozen=True)
class ForecastFigures(JsonRecord):
    """The forecast shown beside the run: the device, images per second, seconds per step."""

    device: str | None = None
    images_per_s: float | None = None
    step_time_s: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SubmissionInputs(JsonRecord):
    """A competition's test images and sample submission found beside the training table (paths)."""

    test_images: str = ""
    sample_submission: str = ""
