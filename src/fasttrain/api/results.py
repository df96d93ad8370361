"""What the API returns: each command's own result, with the figures people read first as typed attributes, the
whole of it as `to_dict()` (the command's `--json` payload, same keys), and a table of itself in a notebook."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.api.show import Shown

if TYPE_CHECKING:
    from rich.console import Console

    from fasttrain.doctor.findings import Finding
    from fasttrain.doctor.result import DoctorResult
    from fasttrain.estimate.result import Estimate
    from fasttrain.hardware.report import HardwareReport
    from fasttrain.plan import Plan as ResolvedPlan
    from fasttrain.profiles.recommend import Recommendation
    from fasttrain.train.run.summary_record import RunSummary as RunRecord


def _path(value: str | None) -> Path | None:
    return Path(value) if value else None


class RunSummary(Shown):
    """What `fasttrain.train()` returns: a view of the run's summary record (train/run/summary_record.py), the
    figures people read first as attributes, the whole of it as to_dict() (summary.json, the same keys)."""

    def __init__(self, summary: RunRecord | Mapping[str, Any]):
        """`summary`: the run's record, or a summary.json's object (read back with RunRecord.from_json)."""
        if isinstance(summary, Mapping):
            from fasttrain.train.run.summary_record import RunSummary as Record
            summary = Record.from_json(summary)
        self.record = summary
        self._plots: str | None = None  # the report's plots as HTML, drawn when a notebook first shows this

    @property
    def summary(self) -> dict[str, Any]:
        """summary.json's object (as to_dict())."""
        return self.record.to_json()

    def to_dict(self) -> dict[str, Any]:
        return self.record.to_json()

    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    @property
    def run_dir(self) -> Path:
        return Path(self.record.run_dir)

    @property
    def epochs_run(self) -> int:
        return self.record.epochs_run or 0

    @property
    def best_val_acc1(self) -> float | None:
        """The best validation top-1 accuracy (0..1) and, in best_epoch, the epoch that reached it."""
        return self.record.best_val_acc1

    @property
    def best_epoch(self) -> int | None:
        return self.record.best_epoch

    @property
    def final_val_acc1(self) -> float | None:
        return self.record.final_val_acc1

    @property
    def final_train_loss(self) -> float | None:
        return self.record.final_train_loss

    @property
    def train_images_per_s(self) -> float | None:
        """Training throughput over the whole run (samples per second for data that are not images)."""
        return self.record.train_images_per_s

    @property
    def wall_s(self) -> float:
        return self.record.wall_s or 0.0

    @property
    def checkpoint_last(self) -> Path | None:
        return _path(self.record.checkpoint_last)

    @property
    def checkpoint_best(self) -> Path | None:
        return _path(self.record.checkpoint_best)

    @property
    def interrupted(self) -> str | None:
        """The signal that stopped the run ("SIGINT" for a notebook's interrupt button), else None."""
        return self.record.interrupted

    @property
    def resume_command(self) -> str | None:
        """How to continue a stopped run (set when a signal stopped it)."""
        return self.record.resume_command

    @property
    def history(self) -> list[dict[str, Any]]:
        """One row per epoch as metrics.jsonl has it: train_loss, val_loss, val_acc1, train_s, ..."""
        return [row.to_json() for row in self.record.history]

    @property
    def per_class(self) -> list[dict[str, Any]]:
        """Validation accuracy of each class, in class order: {"class", "accuracy", "images"}; of the best epoch
        where the run has its matrix (summary.json's per_class_epoch, per_class_basis); [] without one."""
        return [score.to_json() for score in self.record.per_class or ()]

    @property
    def confused(self) -> list[dict[str, Any]]:
        """The most frequent mistakes, most often first: {"true", "predicted", "count", "share" (of true's images)}."""
        return [pair.to_json() for pair in self.record.confused or ()]

    def _repr_html_(self) -> str:
        """In a notebook: the table a terminal shows, then the run's plots (report.html's, drawn once)."""
        if self._plots is None:
            from fasttrain.api.reports import run_plots_html
            self._plots = run_plots_html(self.run_dir) if self.record.run_dir else ""
        from fasttrain.ui.notebook import text_and_html
        return text_and_html(self._drawn())["text/html"] + self._plots

    def draw(self, console: Console) -> None:
        """One line per epoch (as the run printed them), then the end of the run (ui/ending.py's rows)."""
        from fasttrain.core.given import is_given
        from fasttrain.ui.dashboard_format import epoch_line
        from fasttrain.ui.notebook import summary_table
        data = self.record.data or ""
        kind = "custom" if is_given(data) or ":" in data else "images"
        epochs = max(len(self.record.history), self.epochs_run)
        for row in self.history:  # the epoch table's columns are the row's metrics.jsonl keys
            console.print(epoch_line(row, epochs, console.width, kind), markup=False, highlight=False)
        console.print(summary_table(self.record))

    def __repr__(self) -> str:
        return (f"RunSummary(run_dir={str(self.run_dir)!r}, epochs_run={self.epochs_run}, "
                f"best_val_acc1={self.best_val_acc1!r}, wall_s={self.wall_s:.1f})")


class Report(Shown):
    """What `fasttrain.doctor()` returns: the machine, the findings, the recommended settings."""

    def __init__(self, result: DoctorResult):
        self.result = result

    @property
    def report(self) -> HardwareReport:
        return self.result.report

    @property
    def findings(self) -> list[Finding]:
        return list(self.result.findings)

    @property
    def recommendation(self) -> Recommendation:
        return self.result.recommendation

    @property
    def status(self) -> str:
        """The worst finding: "ok", "warn" or "fail"."""
        return self.result.status

    @property
    def profile(self) -> str:
        """The profile checked (the preset `train` picks here when none is given, and why)."""
        return self.result.profile

    def to_dict(self) -> dict[str, Any]:
        return self.result.to_dict()

    def draw(self, console: Console) -> None:
        from fasttrain.doctor import view
        r = self.result
        view.render(r.report, r.findings, r.recommendation, r.profile, r.written, out=console)

    def __repr__(self) -> str:
        return f"Report(status={self.status!r}, profile={self.profile!r}, findings={len(self.result.findings)})"


class Forecast(Shown):
    """What `fasttrain.estimate()` returns: the run's time, memory, bottleneck and cost before it starts."""

    def __init__(self, result: Estimate, model: str):
        self.result, self.model = result, model

    @property
    def total_s(self) -> float | None:
        """Seconds for the whole run (every epoch)."""
        return self.result.forecast.time.get("total_s")

    @property
    def epoch_s(self) -> float | None:
        return self.result.forecast.time.get("epoch_s")

    @property
    def images_per_s(self) -> float | None:
        return self.result.forecast.speed.get("images_per_s")

    @property
    def peak_memory_bytes(self) -> int:
        """GPU memory the training needs (host RAM on a CPU), in bytes; `fits` says whether the device has it."""
        return self.result.forecast.memory.total

    @property
    def fits(self) -> bool | None:
        return self.result.forecast.memory.fits

    @property
    def bottleneck(self) -> str:
        return self.result.forecast.bottleneck.get("name", "")

    @property
    def device(self) -> str:
        return str(self.result.forecast.device.get("name", ""))

    def to_dict(self) -> dict[str, Any]:
        return self.result.to_dict()

    def draw(self, console: Console) -> None:
        from fasttrain.estimate.view import render_estimate
        render_estimate(self.result, self.model, console)

    def __repr__(self) -> str:
        return (f"Forecast(model={self.model!r}, device={self.device!r}, total_s={self.total_s!r}, "
                f"bottleneck={self.bottleneck!r})")


class Plan(Shown):
    """What `fasttrain.plan()` returns: what `train` would do here and why (`fasttrain train --dry-run`)."""

    def __init__(self, plan: ResolvedPlan, view: dict[str, Any]):
        self.plan, self.view = plan, view

    @property
    def device(self) -> str:
        return self.plan.device

    @property
    def precision(self) -> str:
        return str(self.plan.precision)

    @property
    def batch_size(self) -> int:
        """Per device, per step; effective_batch counts accumulation and processes too."""
        return self.plan.batch_size

    @property
    def effective_batch(self) -> int:
        return self.plan.effective_batch

    @property
    def notes(self) -> list[str]:
        return list(self.view.get("notes", []))

    def to_dict(self) -> dict[str, Any]:
        return dict(self.view)

    def draw(self, console: Console) -> None:
        from fasttrain.train.setup.plan_view import plan_lines
        for line in plan_lines(self.view):
            console.print(line, markup=False, soft_wrap=True)

    def __repr__(self) -> str:
        return f"Plan(device={self.device!r}, precision={self.precision!r}, batch_size={self.batch_size})"
