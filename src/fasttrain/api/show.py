"""How the API's results show themselves: as HTML in a notebook (`_repr_html_`), through Rich when printed with
Rich (`__rich_console__`), as plain text otherwise (`str()`). Each is drawn by the command's own view on a recording
console, so a notebook shows what the terminal shows, with the same words and numbers."""
from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from fasttrain.ui.notebook import NOTEBOOK_WIDTH, recording, text_and_html

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType

class Shown:
    """A result that draws itself with draw(console); the ways of showing it follow from that one method."""

    def draw(self, console: Console) -> None:
        raise NotImplementedError

    def _drawn(self, width: int = NOTEBOOK_WIDTH) -> Console:
        console = recording(width)
        self.draw(console)
        return console

    def _repr_html_(self) -> str:  # IPython's display protocol: a notebook shows this
        return text_and_html(self._drawn())["text/html"]

    def __str__(self) -> str:
        return self._drawn().export_text()

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[RenderableType]:
        from rich.text import Text
        drawn = recording(options.max_width)
        self.draw(drawn)
        yield Text.from_ansi(drawn.export_text(styles=True))
