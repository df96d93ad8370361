"""Several runs' curves on the same axes (scratch against fine-tuned, one profile against another): accuracy and
loss against the run's clock (the default comparison: which run is better sooner) and against epochs, and the
training speed over each run. Each run keeps one colour and is labelled `folder (profile, model)`."""
from __future__ import annotations

from typing import TYPE_CHECKING

from fasttrain.report import series as S
from fasttrain.report.figure import COLOURS, new_figure, scaled, time_unit
from fasttrain.report.gather import RunRecord

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _curves(runs: list[RunRecord], by_epoch: bool) -> Figure:
    figure, (acc, loss) = new_figure(2, height=4.2)
    every = [S.epoch_series(run) for run in runs]
    divisor, unit = time_unit([c for ep in every for c in ep.clock_s])
    xlabel = "epoch" if by_epoch else f"time on the run's clock ({unit})"
    for n, (run, ep) in enumerate(zip(runs, every, strict=True)):
        colour = COLOURS[n % len(COLOURS)]
        x = [float(e) for e in ep.epoch] if by_epoch else scaled(ep.clock_s, divisor)
        acc.plot(x, [float("nan") if v is None else 100 * v for v in ep.val_acc1], "o-", color=colour,
                 label=run.label)
        loss.plot(x, scaled(ep.val_loss, 1.0), "o-", color=colour, label=run.label)
        loss.plot(x, scaled(ep.train_loss, 1.0), ":", color=colour, label=f"{run.label}: train")
        for target, clock, epoch in S.milestones(run):
            at = epoch if by_epoch else clock / divisor
            if at is not None:
                acc.plot([at], [100 * target], "D", color=colour, ms=6)
    acc.set(xlabel=xlabel, ylabel="validation accuracy (top-1, %)", ylim=(0, 100),
            title="validation accuracy (diamonds: time to accuracy)")
    loss.set(xlabel=xlabel, ylabel="loss (cross-entropy)", title="validation loss (solid), train loss (dotted)")
    for ax in (acc, loss):
        ax.legend(loc="best", fontsize=7)
        ax.grid(alpha=0.3)
    return figure


def _speed(runs: list[RunRecord]) -> Figure:
    figure, (ax,) = new_figure(height=3.6)
    every = [S.step_series(run) for run in runs]
    divisor, unit = time_unit([c for st in every for c in st.clock_s])
    for n, (run, st) in enumerate(zip(runs, every, strict=True)):
        ax.plot(scaled(st.clock_s, divisor), scaled(st.images_per_s, 1.0), ".-", color=COLOURS[n % len(COLOURS)],
                label=run.label)
    ax.set(xlabel=f"time on the run's clock ({unit})", ylabel="training images/s")
    ax.legend(loc="best", fontsize=7)
    ax.grid(alpha=0.3)
    return figure


def overlay_figures(runs: list[RunRecord]) -> dict[str, Figure]:
    """file stem -> figure, in the page's order."""
    return {"accuracy-time": _curves(runs, by_epoch=False), "accuracy-epoch": _curves(runs, by_epoch=True),
            "speed": _speed(runs)}


# file stem -> the heading its section has on the page
OVERLAY_HEADINGS = {"accuracy-time": "Accuracy and loss against wall time",
                    "accuracy-epoch": "Accuracy and loss against epochs", "speed": "Speed"}
