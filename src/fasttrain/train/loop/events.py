"""What the training loop and the run tell their listeners: the callback seam between training and display.

The loop and the run never import a display. A listener (the command's dashboard, the run log through
RunLogListener, a test's recorder) implements TrainListener and is handed in; `Listeners` fans one call
out to several. Telemetry is not a listener: the loop records each step into it and reads its rolling
snapshot back, which every StepEvent then carries. No torch here (imported by the commands).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol, TextIO, runtime_checkable

from fasttrain.datasets.bundle import BadFiles
from fasttrain.hardware.report import HardwareReport
from fasttrain.plan import Plan
from fasttrain.telemetry.recorder import Telemetry
from fasttrain.telemetry.step_record import StepRecord
from fasttrain.tuning.store import Measurement

if TYPE_CHECKING:  # checkpoint.py imports torch; this module must not
    from fasttrain.train.loop.epoch_row import EpochRow
    from fasttrain.train.run.summary_record import RunSummary
    from fasttrain.train.state.checkpoint_policy import CheckpointPolicy


# What a logged step's row takes from telemetry's snapshot: the rates, and the memory held (bytes: this process and
# its loader workers, the GPU's allocator) beside the limit it is held against (the host's RAM, the GPU's memory),
# so the report draws memory over the run.
STEP_ROW_SNAPSHOT = ("images_per_s", "it_per_s", "process_rss_bytes", "host_ram_total_bytes",
                     "gpu_mem_reserved_bytes", "gpu_mem_peak_bytes", "gpu_mem_total_bytes")


@dataclass(frozen=True)
class StepEvent:
    """The latest logged step: its own figures and, with telemetry, the rolling snapshot."""

    record: StepRecord             # epoch, step, batch_index, loss, lr, *_s timings (seconds), ...
    snapshot: dict[str, Any] | None = None   # telemetry's rolling figures (images_per_s, ...); None without it


@dataclass(frozen=True)
class RunEnd:
    """The finished (or stopped) run: the whole summary (summary.json); ui/ending.py says what of it is printed."""

    summary: RunSummary


@runtime_checkable
class TrainListener(Protocol):
    """Told, in this order: run start (with the plan and its notes), each logged step, each epoch's row,
    messages at any time (level "info", "warning" or "error"), and once the run end."""

    def on_run_start(self, plan: Plan, notes: list[str]) -> None: ...

    def on_step(self, event: StepEvent) -> None: ...

    def on_epoch_end(self, row: EpochRow) -> None: ...

    def on_message(self, text: str, level: str = "info") -> None: ...

    def on_run_end(self, end: RunEnd) -> None: ...


class Listeners:
    """Several listeners as one; with none it is a silent listener."""

    def __init__(self, listeners: Iterable[TrainListener | None] = ()):
        self.listeners = [x for x in listeners if x is not None]

    def on_run_start(self, plan: Plan, notes: list[str]) -> None:
        for x in self.listeners:
            x.on_run_start(plan, notes)

    def on_step(self, event: StepEvent) -> None:
        for x in self.listeners:
            x.on_step(event)

    def on_epoch_end(self, row: EpochRow) -> None:
        for x in self.listeners:
            x.on_epoch_end(row)

    def on_message(self, text: str, level: str = "info") -> None:
        for x in self.listeners:
            x.on_message(text, level)

    def on_run_end(self, end: RunEnd) -> None:
        for x in self.listeners:
            x.on_run_end(end)


class StepLog(Protocol):
    """A metrics sink (runlog.RunLog): one row per logged step and per epoch."""

    def log_step(self, record: dict[str, Any]) -> None: ...

    def log_epoch(self, row: EpochRow) -> None: ...

    def write_summary(self, summary: RunSummary) -> object: ...


class RunLogListener:
    """Writes what the loop reports to a StepLog; at the run end also the summary (when the sink keeps one)."""

    def __init__(self, log: StepLog):
        self.log = log

    def on_run_start(self, plan: Plan, notes: list[str]) -> None:
        pass  # the run writes the resolved profile itself, before the loop starts

    def on_step(self, event: StepEvent) -> None:
        row = asdict(event.record)
        del row["end_time"]  # a perf_counter stamp: meaningless in a log
        snapshot = event.snapshot or {}
        for key in STEP_ROW_SNAPSHOT:
            if snapshot.get(key) is not None:
                row[key] = snapshot[key]
        self.log.log_step(row)

    def on_epoch_end(self, row: EpochRow) -> None:
        self.log.log_epoch(row)

    def on_message(self, text: str, level: str = "info") -> None:
        pass  # metrics.jsonl holds figures; messages go to the display and the summary's notes

    def on_run_end(self, end: RunEnd) -> None:
        self.log.write_summary(end.summary)


@dataclass
class Collaborators:
    """What the training loop reports to; every field may be None."""

    telemetry: Telemetry | None = None      # records steps, gives the snapshot
    dashboard: TrainListener | None = None  # the command's display (already entered)
    runlog: StepLog | None = None           # runlog.RunLog, told through RunLogListener
    checkpoints: CheckpointPolicy | None = None
    warn: Callable[[str], None] = lambda text: None
    bad: BadFiles | None = None             # the data's skipped unreadable files (DataBundle.bad)

    def listeners(self) -> Listeners:
        return Listeners([self.dashboard, RunLogListener(self.runlog) if self.runlog is not None else None])


@dataclass(frozen=True)
class RunDisplay:
    """What a display of a run needs, known once the loaders exist (total_batches)."""

    plan: Plan
    total_batches: int             # loader batches over the whole run
    epochs: int
    stream: TextIO                 # text stream to draw on (stdout, stderr under --json, a sink off rank 0)
    report: HardwareReport | None
    telemetry: Telemetry | None
    forecast: dict[str, Any] | None
    quiet: bool                    # --quiet, or a rank other than 0: only errors and the summary
    plain: bool                    # --json: plain lines (progress on stderr), never the live screen
    data_kind: str = "images"      # DataBundle.kind: a display says img/s for images, samples/s otherwise
    measured: tuple[Measurement, ...] = ()  # made on this machine: the verdict's advice reads them
    input_gain: str | None = None  # what prepared shards measured on this data, for the input-bound verdict
    classes: str | None = None     # "10 classes: T-shirt, Trouser, ... Ankle boot" (setup/plan_view.classes_text)
    deadline: float | None = None  # time.time() by which a budgeted run ends (--time-budget...): no ETA goes past it


# The command layer's display for a run: a context manager (entered around training) yielding a listener.
DisplayFactory = Callable[[RunDisplay], AbstractContextManager[TrainListener]]
