"""A run in a notebook: the dashboard's screen, redrawn in place in the cell's output, and at the end the summary.

The Dashboard (ui/dashboard.py) keeps the figures and draws its live screen, so a notebook shows the same numbers and
verdict as a terminal; it draws here on a recording console instead of a terminal, and this listener decides when
(at most every REFRESH_S seconds, at each epoch's end and message, and at the end) and where: one output of the
cell, replaced in place through IPython's display ids (update_display_data), as HTML with a plain-text twin. Why not
Rich's Live: in a notebook it needs ipywidgets, whose output a notebook file does not keep and some frontends do not
show; display ids need only IPython, which every notebook kernel (Jupyter, VS Code, Colab, Kaggle) has.
"""
from __future__ import annotations

import contextlib
import io
import sys
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fasttrain.train.loop.events import RunDisplay, RunEnd, StepEvent
from fasttrain.ui.dashboard import Dashboard

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

    from fasttrain.plan import Plan
    from fasttrain.train.loop.epoch_row import EpochRow
    from fasttrain.train.run.summary_record import RunSummary

# Characters per line: a notebook's output cell at its default width (Jupyter, Colab and Kaggle show ~110).
NOTEBOOK_WIDTH = 110
# Seconds between redraws while steps run. A redraw (the screen's layout, then its HTML) costs the training thread
# a few ms (benchmarks/notebook_display.py): once a second is under 1% of the time and still reads as live.
REFRESH_S = 1.0
MESSAGES = 6  # the latest notes and warnings, shown above the screen
# Rich's own Jupyter frame (rich/jupyter.py): monospace, no wrapping, scroll sideways when wider than the cell.
HTML_FRAME = ('<pre style="white-space:pre;overflow-x:auto;line-height:normal;'
              "font-family:Menlo,'DejaVu Sans Mono',consolas,'Courier New',monospace\">{code}</pre>")

Show = Callable[[dict[str, str]], None]  # puts a mime bundle in the cell's output (the first call) or replaces it


def in_notebook() -> bool:
    """Running in a notebook's kernel (IPython with a kernel: Jupyter, VS Code, Colab, Kaggle), not a terminal."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return shell is not None and getattr(shell, "kernel", None) is not None


def tqdm_without_widgets() -> None:
    """In a notebook's kernel without ipywidgets, import tqdm.auto once with its `TqdmWarning: IProgress not found`
    silenced: timm imports huggingface_hub, which imports tqdm.auto, which printed that warning in red under a
    user's first `fasttrain.train()` (issue 43). Imported here, tqdm.auto settles on its plain text bars and every
    later import finds it made; with ipywidgets present it draws widgets, and there is nothing to silence."""
    if "tqdm.auto" in sys.modules or not in_notebook():
        return
    try:
        from tqdm.std import TqdmWarning
    except ImportError:  # no tqdm: nothing will warn
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmWarning)
        import tqdm.auto  # noqa: F401 - the import is the point


def recording(width: int = NOTEBOOK_WIDTH) -> Console:
    """A console that draws into memory, in colour, at `width`, and records what it drew for export."""
    from rich.console import Console
    return Console(record=True, file=io.StringIO(), width=width, force_terminal=True, color_system="truecolor",
                   highlight=False, force_jupyter=False)


def text_and_html(console: Console) -> dict[str, str]:
    """What `console` drew since the last call, as a notebook's mime bundle (plain text and HTML)."""
    text = console.export_text(clear=False)
    return {"text/plain": text, "text/html": console.export_html(inline_styles=True, code_format=HTML_FRAME)}


def summary_table(summary: RunSummary) -> RenderableType:
    """The end of a run as the terminal says it (ui/ending.py's rows), as a table."""
    from rich.table import Table

    from fasttrain.ui.ending import ending_rows
    table = Table(title="summary (all of it: summary.json in the run folder)", title_justify="left", show_header=False)
    table.add_column("what", style="bold", no_wrap=True)
    table.add_column("value", overflow="fold")  # a path or a command is folded, never cut with an ellipsis
    for label, value in ending_rows(summary):
        table.add_row(label, value)
    return table


def ipython_show() -> Show:
    """A Show on the running kernel: the first bundle becomes an output with a display id, later ones replace it."""
    from IPython.display import display
    handle: list[Any] = []

    def show(bundle: dict[str, str]) -> None:
        if handle:
            handle[0].update(bundle, raw=True)
        else:
            handle.append(display(bundle, raw=True, display_id=True))
    return show


class NotebookDisplay:
    """A TrainListener (train/loop/events.py) and its own context manager: enter it around the run."""

    def __init__(self, spec: RunDisplay, *, show: Show | None = None, clock: Callable[[], float] = time.monotonic):
        self.console = recording()
        self.dashboard = Dashboard(spec.plan, total_batches=spec.total_batches, epochs=spec.epochs, mode="quiet",
                                   stream=io.StringIO(), report=spec.report, telemetry=spec.telemetry,
                                   console=self.console, forecast=spec.forecast, data_kind=spec.data_kind,
                                   measured=spec.measured, input_gain=spec.input_gain, deadline=spec.deadline)
        self.show = show or ipython_show()
        self.clock = clock
        self.classes = spec.classes  # the class count and names: the cell's first line
        self.messages: list[str] = []
        self.end: RunEnd | None = None
        self.last_draw: float | None = None
        self.draws = 0

    def __enter__(self) -> NotebookDisplay:
        self.draw()
        return self

    def __exit__(self, *exc: object) -> None:
        self.draw()  # the last figures stay in the cell, also when the run stopped on an error

    # -- the TrainListener protocol ----------------------------------------------------------------
    def on_run_start(self, plan: Plan, notes: list[str]) -> None:
        for note in notes:
            self.on_message(f"note: {note}")

    def on_step(self, event: StepEvent) -> None:
        self.dashboard.on_step(event)
        if self.last_draw is None or self.clock() - self.last_draw >= REFRESH_S:
            self.draw()

    def on_epoch_end(self, row: EpochRow) -> None:
        self.dashboard.on_epoch_end(row)
        self.draw()

    def on_message(self, text: str, level: str = "info") -> None:
        self.messages = ([*self.messages, text if level == "info" else f"{level}: {text}"])[-MESSAGES:]
        self.draw()

    def on_run_end(self, end: RunEnd) -> None:
        self.end = end
        self.dashboard.finish(end.summary)  # the last frame says done (or stopped), not an ETA
        self.draw()

    # -- drawing -----------------------------------------------------------------------------------
    def draw(self) -> None:
        """The messages, the screen and (at the end) the summary, in place of what the cell showed before."""
        from rich.console import Group
        from rich.text import Text

        self.last_draw = self.clock()
        try:
            parts: list[Any] = [Text(self.classes)] if self.classes else []
            parts += [Text(line, style="dim") for line in self.messages]
            parts.append(self.dashboard.render())
            if self.end is not None:
                parts.append(summary_table(self.end.summary))
            self.console.print(Group(*parts))
            bundle = text_and_html(self.console)
        except Exception as exc:
            bundle = {"text/plain": f"fasttrain: display error: {type(exc).__name__}: {exc}"}
        self.draws += 1
        with contextlib.suppress(Exception):
            self.show(bundle)


def notebook_display(spec: RunDisplay) -> NotebookDisplay | Dashboard:
    """The display factory the API hands to the run in a notebook (a quiet run gets the quiet dashboard)."""
    if spec.quiet:
        return Dashboard(spec.plan, total_batches=spec.total_batches, epochs=spec.epochs, mode="quiet",
                         stream=spec.stream, report=spec.report, telemetry=spec.telemetry, data_kind=spec.data_kind)
    return NotebookDisplay(spec)
