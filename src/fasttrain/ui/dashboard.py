"""The training dashboard: Rich Live on a terminal, plain lines off it, or (almost) nothing with --quiet.

It is a TrainListener (fasttrain.train.loop.events): the command builds it and hands it to the run, so the training
code never imports it.

The loop's on_step (update(snapshot, rec)) comes at every logged step; that stores references and checks a clock.
Drawing is throttled and happens on the calling thread: the live screen is redrawn at most REFRESH_PER_SECOND times a
second, a plain line written at most every `plain_every_s` seconds. Why not Rich's own refresh thread: a redraw holds
the GIL for 1-2 ms, and on a loaded machine a background thread preempted while holding it stalls the training thread
far longer than the redraw itself (measured with benchmarks/telemetry_overhead.py: ~0.92 of bare throughput on a busy
2-core box); drawn inline, the cost is exactly the redraw and only when there is something new to show.
"""
from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from fasttrain.core.console import is_tty
from fasttrain.hardware.report import HardwareReport
from fasttrain.plan import Plan
from fasttrain.telemetry import verdict as vd
from fasttrain.train.loop.events import RunEnd, StepEvent
from fasttrain.ui.dashboard_format import epoch_line, plain_line, plan_line
from fasttrain.ui.ending import ending_lines, run_state

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from fasttrain.telemetry.step_record import StepRecord
    from fasttrain.train.loop.epoch_row import EpochRow
    from fasttrain.train.run.summary_record import RunSummary

MODES = ("live", "plain", "quiet")
# 4 redraws a second looks live to a person; each costs 1-2 ms (measured in the benchmark): < 1% of the time.
REFRESH_PER_SECOND = 4
LIVE_MESSAGES = 4


def choose_mode(quiet: bool, stream: TextIO | None = None) -> str:
    """quiet wins; a real terminal gets the live screen; pipes, files and CI get plain lines."""
    if quiet:
        return "quiet"
    return "live" if is_tty(stream) else "plain"


class Dashboard:
    """Context manager: `with Dashboard(plan, total_batches=..., epochs=..., mode=...) as dash:`.

    total_batches counts loader batches over the whole run (epochs x batches per epoch).
    `telemetry` (optional): when update() gets snapshot=None, the live screen pulls telemetry.snapshot()
    itself at redraw time, so the loop need not build a snapshot per batch.
    `data_kind` (the DataBundle's kind): throughput reads img/s for images, samples/s for other data.
    `classes`: the class count and names in one line (setup/plan_view.classes_text), shown first.
    `deadline`: with a time budget, `wall_clock()` (time.time) by which the run ends: no ETA goes past it.
    """

    def __init__(self, plan: Plan, *, total_batches: int, epochs: int, mode: str = "plain",
                 forecast: dict[str, Any] | None = None, stream: TextIO | None = None, plain_every_s: float = 10.0,
                 report: HardwareReport | None = None, telemetry: Any = None, console: Any = None,
                 clock: Callable[[], float] = time.monotonic, data_kind: str = "images",
                 measured: tuple[Any, ...] = (), input_gain: str | None = None, classes: str | None = None,
                 deadline: float | None = None, wall_clock: Callable[[], float] = time.time):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.plan, self.report, self.forecast = plan, report, forecast
        self.total_batches, self.epochs, self.mode = total_batches, epochs, mode
        self.data_kind = data_kind
        self.measured = measured
        self.input_gain = input_gain  # the measured shard factor for the input-bound verdict (verdict.assess)
        self.classes = classes  # "10 classes: T-shirt, ... Ankle boot": the line under the header
        self.deadline = deadline  # wall_clock() by which a budgeted run ends (--time-budget...): the ETA's cap
        self._wall_clock = wall_clock
        self.ended: tuple[str, str | None] | None = None  # the run is over: ("done" or "stopped", why), ending.py
        self.stream = stream if stream is not None else sys.stdout
        self.plain_every_s = plain_every_s
        self.telemetry = telemetry
        self._console = console
        self._clock = clock
        self._snap: dict[str, Any] | None = None
        self._rec: Any = None
        self._rows: list[dict[str, Any]] = []
        self._messages: list[str] = []
        self._live: Any = None
        self._opened: float | None = None  # clock() when the display opened: the elapsed time
        self._last_plain: float | None = None
        self._last_draw = 0.0
        self._last_kind: str | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> Dashboard:
        self._opened = self._clock()
        if self.mode == "live":
            from rich.live import Live

            if self.classes:  # above the live region: it stays in the scrollback, the screen keeps its rows
                self.console.print(self.classes, markup=False, highlight=False, no_wrap=True, overflow="crop")
            self._live = Live(console=self.console, get_renderable=self._render_safe, auto_refresh=False,
                              transient=False)
            self._live.start(refresh=True)
            self._last_draw = self._clock()
        elif self.mode == "plain":
            self._write(f"fasttrain: {self.header}")
            if self.classes:
                self._write(self.classes)  # 80 columns wide as it comes
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self._closed:
            self._stop_live()
            self._closed = True

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False)
        return self._console

    # -- the loop's calls ------------------------------------------------------------------------
    def update(self, snapshot: dict[str, Any] | None, rec: StepRecord | None = None) -> None:
        """Store the latest figures; redraw (live) or write a line (plain) when the throttle allows."""
        if snapshot is not None:
            self._snap = snapshot
        self._rec = rec
        if self.mode == "live":
            now = self._clock()
            last_batch = rec is not None and rec.batch_index + 1 >= rec.batches_in_epoch  # validation comes next
            if self._live is not None and (now - self._last_draw >= 1.0 / REFRESH_PER_SECOND or last_batch):
                self._last_draw = now
                self._live.refresh()
            return
        if self.mode != "plain":
            return
        now = self._clock()
        if self._last_plain is None:
            self._last_plain = now  # first line after plain_every_s: the first batches are warm-up anyway
            return
        if now - self._last_plain >= self.plain_every_s:
            self._last_plain = now
            self._print_plain()

    def epoch_end(self, row: dict[str, Any]) -> None:
        """One row of the epoch table (keys chosen by the loop: epoch, train_loss, val_acc1, time_s, ...)."""
        self._rows.append(dict(row))
        if self.mode == "live" and self._live is not None:  # above the live region: one line per epoch scrolls up
            self._live.console.print(epoch_line(row, self.epochs, self.console.width, self.data_kind),
                                     markup=False, highlight=False, no_wrap=True, overflow="crop")
            self._live.refresh()
        if self.mode == "plain":
            self._write("epoch done: " + epoch_line(row, self.epochs, None, self.data_kind))
            self._plain_verdict(self._current())

    def message(self, text: str, level: str = "info") -> None:
        """A line above the live screen / in the plain log; with --quiet only errors are shown."""
        line = text if level == "info" else f"{level}: {text}"
        if self.mode == "quiet" and level != "error":
            return
        if self.mode == "live" and self._live is not None:
            self._messages = [*self._messages, line][-LIVE_MESSAGES:]
            self._live.console.print(line, markup=False, highlight=False)
        else:
            self._write(line)

    def finish(self, summary: RunSummary) -> None:
        """The run is over: the frames drawn from now on say so (done, or stopped) instead of an ETA."""
        self.ended = run_state(summary)

    def budget_left_s(self) -> float | None:
        """Seconds until the time budget's deadline (negative past it), or None without a budget."""
        return None if self.deadline is None else self.deadline - self._wall_clock()

    def close(self, summary: RunSummary | None = None) -> None:
        """Stop redrawing and print the final summary (in every mode, --quiet included)."""
        if self._closed:
            return
        if summary is not None:
            self.finish(summary)
        if self.mode == "live" and self._live is not None:
            self._live.refresh()
        self._stop_live()
        self._closed = True
        if summary is None:
            return
        # On a terminal the lines are broken between words to its width, commands with ` \` (copied, they still run);
        # off one (a pipe, a log) each stays whole.
        width = self.console.width - 2 if self.mode == "live" else None
        head = "summary (all of it: summary.json in the run folder):"
        for line in [head, *("  " + ln for ln in ending_lines(summary, width))]:
            if self.mode == "live":
                self.console.print(line, markup=False, highlight=False, soft_wrap=True)
            else:
                self._write(line)

    # -- the TrainListener protocol (fasttrain.train.loop.events): what the loop and the run tell it ----------
    def on_run_start(self, plan: Plan, notes: list[str]) -> None:
        for note in notes:
            self.message(f"note: {note}")

    def on_step(self, event: StepEvent) -> None:
        if event.snapshot is not None:  # without telemetry there are no rolling figures, and nothing new to draw
            self.update(event.snapshot, event.record)

    def on_epoch_end(self, row: EpochRow) -> None:
        self.epoch_end(row.to_json())  # the epoch table's columns are the row's metrics.jsonl keys

    def on_message(self, text: str, level: str = "info") -> None:
        self.message(text, level)

    def on_run_end(self, end: RunEnd) -> None:
        self.close(end.summary)

    # -- plain -----------------------------------------------------------------------------------
    def _write(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()

    def _current(self) -> dict[str, Any] | None:
        if self._snap is None and self.telemetry is not None:
            return self.telemetry.snapshot()
        return self._snap

    def _print_plain(self) -> None:
        snap = self._current()
        if not snap:
            return
        self._write(plain_line(snap, self.epochs, self.total_batches, self.data_kind, self.budget_left_s()))
        self._plain_verdict(snap)

    def _plain_verdict(self, snap: dict[str, Any] | None) -> None:
        """The verdict's line, written only when its kind changes (docs/dashboard.md): a log read later shows
        each change once, not the same sentence after every epoch."""
        if not snap:
            return
        verdict = vd.assess(snap, self.plan, self.report, self.measured, self.input_gain, self.run_s(snap))
        if verdict.kind != self._last_kind:
            self._last_kind = verdict.kind
            self._write(f"verdict: {verdict.text}")

    def run_s(self, snap: dict[str, Any]) -> float | None:
        """The whole run's training time at the current step rate (seconds), for the verdict's advice."""
        step = snap.get("step_time_s")
        return step * self.total_batches if step is not None and self.total_batches else None

    @property
    def header(self) -> str:
        """The run in one line (dashboard_format.plan_line)."""
        return plan_line(self.plan)

    # -- live ------------------------------------------------------------------------------------
    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _render_safe(self) -> Any:
        try:
            return self.render()
        except Exception as exc:
            from rich.text import Text

            return Text(f"dashboard error: {exc.__class__.__name__}: {exc}")

    def render(self) -> RenderableType:
        """The live screen as one Rich renderable (also used by tests)."""
        from fasttrain.ui import dashboard_view

        elapsed = self._clock() - self._opened if self._opened is not None else None
        model = dashboard_view.ScreenModel(self.header, self.plan, self.report, self.forecast, self.total_batches,
                                           self.epochs, tuple(self._rows), self.data_kind,
                                           self.measured, self.input_gain, elapsed, self.run_s(self._current() or {}),
                                           self.budget_left_s(), self.ended)
        return dashboard_view.screen(model, self._current() or {}, self.console)
