"""matplotlib's figures as the report uses them: made without pyplot (no global backend is chosen or changed, so a
notebook's own plots are untouched; Figure draws through Agg, no display needed), saved as PNG bytes with no
metadata (matplotlib's would name its web address), time axes in the unit that reads best."""
from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

WIDTH_IN, HEIGHT_IN, DPI = 10.0, 3.6, 100   # inches, and pixels an inch: 1,000 px wide PNGs
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def new_figure(columns: int = 1, rows: int = 1, height: float = HEIGHT_IN) -> tuple[Figure, list[Axes]]:
    from matplotlib.figure import Figure
    figure = Figure(figsize=(WIDTH_IN, height * rows), dpi=DPI, layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False)
    return figure, [ax for row in axes for ax in row]


def png_bytes(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue()


def time_unit(seconds: Sequence[float | None]) -> tuple[float, str]:
    """(divisor, unit) for a time axis spanning `seconds`: s up to 10 minutes, then min up to 5 hours, then h."""
    top = max((s for s in seconds if s is not None), default=0.0)
    if top > 5 * 3600:
        return 3600.0, "h"
    return (60.0, "min") if top > 600 else (1.0, "s")


def scaled(values: Sequence[float | None], divisor: float) -> list[float]:
    """Values divided for an axis; None becomes NaN (a gap in the line)."""
    return [float("nan") if v is None else v / divisor for v in values]


def note(ax: Axes, text: str) -> None:
    """Say on an empty plot why it is empty (the axes keep their names)."""
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", wrap=True, color="#555555")


def has_values(values: Sequence[float | None]) -> bool:
    return any(v is not None for v in values)
