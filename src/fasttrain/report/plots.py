"""One run's figures, each with its axes named and their units said: accuracy and loss against the run's clock and
against epochs (time-to-accuracy milestones marked), the LR (and the batch, when it changed) over the run with the
time budget's end, images/s and each batch's time split with the forecast's images/s, memory against the device's
limit, the confusion matrix and per-class accuracy. What is drawn comes from series.py; this file only draws."""
from __future__ import annotations

from typing import TYPE_CHECKING

from fasttrain.report import series as S
from fasttrain.report.figure import (
    COLOURS,
    has_values,
    new_figure,
    note,
    scaled,
    time_unit,
)
from fasttrain.report.gather import RunRecord

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

GIB = 1024 ** 3
MAX_LABELLED_CLASSES = 30   # above this many classes the matrix's ticks are left unnamed (unreadable)


def _accuracy_and_loss(run: RunRecord, by_epoch: bool) -> Figure:
    ep = S.epoch_series(run)
    figure, (acc, loss) = new_figure(2)
    divisor, unit = time_unit(ep.clock_s)
    x = [float(e) for e in ep.epoch] if by_epoch else scaled(ep.clock_s, divisor)
    xlabel = "epoch" if by_epoch else f"time on the run's clock ({unit})"
    acc.plot(x, [float("nan") if v is None else 100 * v for v in ep.val_acc1], "o-", color=COLOURS[0],
             label="validation acc@1")
    for target, clock, epoch in S.milestones(run):
        at = epoch if by_epoch else clock / divisor
        if at is None:
            continue
        acc.axhline(100 * target, color="#bbbbbb", lw=0.8, ls=":")
        acc.plot([at], [100 * target], "D", color=COLOURS[3], ms=7)
        acc.annotate(f"{100 * target:.0f}%", (at, 100 * target), textcoords="offset points", xytext=(6, -12),
                     fontsize=8, color=COLOURS[3])
    acc.set(xlabel=xlabel, ylabel="validation accuracy (top-1, %)", ylim=(0, 100))
    loss.plot(x, scaled(ep.train_loss, 1.0), "o-", color=COLOURS[1], label="train loss")
    loss.plot(x, scaled(ep.val_loss, 1.0), "s--", color=COLOURS[2], label="validation loss")
    loss.set(xlabel=xlabel, ylabel="loss (cross-entropy)")
    for ax, values in ((acc, ep.val_acc1), (loss, ep.train_loss + ep.val_loss)):
        if by_epoch:
            from matplotlib.ticker import MaxNLocator
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if has_values(values):
            ax.legend(loc="best", fontsize=8)
        else:
            note(ax, "no epoch finished: nothing validated yet")
        ax.grid(alpha=0.3)
    if S.milestones(run) and has_values(ep.val_acc1):
        acc.plot([], [], "D", color=COLOURS[3], label="time to accuracy")
        acc.legend(loc="best", fontsize=8)
    return figure


def accuracy_by_time(run: RunRecord) -> Figure:
    return _accuracy_and_loss(run, by_epoch=False)


def accuracy_by_epoch(run: RunRecord) -> Figure:
    return _accuracy_and_loss(run, by_epoch=True)


def _budget_line(ax: Axes, run: RunRecord, divisor: float) -> None:
    budget = S.budget_end_s(run)
    if budget is not None:
        ax.axvline(budget[0] / divisor, color=COLOURS[1], ls="--", lw=1.2, label=f"budget's end ({budget[1]})")


def learning_rate(run: RunRecord) -> Figure:
    st = S.step_series(run)
    figure, (ax,) = new_figure()
    budget = S.budget_end_s(run)
    divisor, unit = time_unit(st.clock_s + ([budget[0]] if budget else []))
    x = scaled(st.clock_s, divisor)
    ax.plot(x, scaled(st.lr, 1.0), ".-", color=COLOURS[0], label="learning rate")
    ax.set(xlabel=f"time on the run's clock ({unit})", ylabel="learning rate (per optimizer step)")
    _budget_line(ax, run, divisor)
    if st.batch_changed:
        right = ax.twinx()
        right.step(x, [float("nan") if b is None else b for b in st.batch], where="post", color=COLOURS[3],
                   label="effective batch")
        right.set_ylabel("effective batch (images per optimizer step)")
        right.legend(loc="upper center", fontsize=8)
    if not has_values(st.lr):
        note(ax, "no step was logged")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(alpha=0.3)
    return figure


def speed(run: RunRecord) -> Figure:
    st = S.step_series(run)
    figure, (rate, split) = new_figure(1, 2, height=2.8)
    divisor, unit = time_unit(st.clock_s)
    x = scaled(st.clock_s, divisor)
    xlabel = f"time on the run's clock ({unit})"
    rate.plot(x, scaled(st.images_per_s, 1.0), ".-", color=COLOURS[0], label="measured (rolling window)")
    forecast = run.summary.forecast.images_per_s if run.summary.forecast is not None else None
    if isinstance(forecast, (int, float)) and forecast > 0:
        rate.axhline(forecast, color=COLOURS[3], ls="--", label=f"forecast: {forecast:,.0f} images/s")
    measured = run.summary.train_images_per_s
    if isinstance(measured, (int, float)) and measured > 0:
        rate.axhline(measured, color=COLOURS[2], ls=":", label=f"measured over the run: {measured:,.0f} images/s")
    rate.set(xlabel=xlabel, ylabel="training images/s")
    parts = [("data wait", st.data_wait_s, COLOURS[1]), ("host-to-device", st.h2d_s, COLOURS[4]),
             ("compute", st.compute_s, COLOURS[0])]
    if has_values(st.compute_s):
        split.stackplot(x, *[[0.0 if v is None else 1000 * v for v in values] for _, values, _ in parts],
                        labels=[name for name, _, _ in parts], colors=[c for _, _, c in parts], alpha=0.8)
        split.legend(loc="upper right", fontsize=8)
    else:
        note(split, "no step was logged")
    split.set(xlabel=xlabel, ylabel="one batch's time (ms)")
    if has_values(st.images_per_s):
        rate.legend(loc="lower right", fontsize=8)
    else:
        note(rate, "no step was logged")
    for ax in (rate, split):
        ax.grid(alpha=0.3)
    return figure


def memory(run: RunRecord) -> Figure:
    st = S.step_series(run)
    figure, (ax,) = new_figure()
    divisor, unit = time_unit(st.clock_s)
    ax.plot(scaled(st.clock_s, divisor), scaled(st.memory_bytes, GIB), ".-", color=COLOURS[0], label=st.memory_what)
    if st.memory_limit_bytes:
        device = "the GPU's memory" if st.memory_what.startswith("GPU") else "the machine's RAM"
        ax.axhline(st.memory_limit_bytes / GIB, color=COLOURS[1], ls="--",
                   label=f"limit: {device}, {st.memory_limit_bytes / GIB:,.1f} GiB")
        ax.set_ylim(0, st.memory_limit_bytes / GIB * 1.08)
    ax.set(xlabel=f"time on the run's clock ({unit})", ylabel="memory (GiB)")
    if has_values(st.memory_bytes):
        ax.legend(loc="center right", fontsize=8)
    else:
        note(ax, "this run's metrics.jsonl records no memory (written before fasttrain logged it)")
    ax.grid(alpha=0.3)
    return figure


def classes(run: RunRecord) -> Figure:
    matrix, names = S.confusion(run), run.class_names
    per_class = list(run.summary.per_class or ())
    figure, (grid, bars) = new_figure(2, height=max(3.6, min(9.0, 0.28 * len(per_class) + 1.5)))
    if matrix is not None:
        n = len(matrix)
        shown = grid.imshow([[v / max(1, sum(row)) for v in row] for row in matrix], cmap="Blues", vmin=0, vmax=1)
        figure.colorbar(shown, ax=grid, label="share of the true class's images")
        labels = [names[i] if i < len(names) else str(i) for i in range(n)]
        if n <= MAX_LABELLED_CLASSES:
            grid.set_xticks(range(n), labels, rotation=60, ha="right", fontsize=8)
            grid.set_yticks(range(n), labels, fontsize=8)
            if n <= 12:
                for t, row in enumerate(matrix):
                    for p, count in enumerate(row):
                        grid.text(p, t, str(count), ha="center", va="center", fontsize=7,
                                  color="white" if count > 0.6 * max(1, sum(row)) else "black")
        grid.set(xlabel="predicted class", ylabel="true class")
    else:
        grid.set(xlabel="predicted class", ylabel="true class", xticks=[], yticks=[])
        note(grid, run.summary.per_class_note or "no confusion matrix in summary.json")
    accuracy = [c.accuracy for c in per_class]
    if per_class:
        positions = list(range(len(per_class)))
        bars.barh(positions, [100 * (a or 0.0) for a in accuracy], color=COLOURS[0])
        bars.set_yticks(positions, [c.name for c in per_class], fontsize=8)
        bars.invert_yaxis()
        bars.set_xlim(0, 100)
    else:
        note(bars, "no per-class accuracy: nothing validated yet")
    bars.set(xlabel="validation accuracy of the class (top-1, %)", ylabel="class")
    bars.grid(alpha=0.3, axis="x")
    return figure


# (file stem, heading, drawing) in the page's order; the heading names the section the figure sits in.
FIGURES = (("accuracy-time", "Accuracy and loss against wall time", accuracy_by_time),
           ("accuracy-epoch", "Accuracy and loss against epochs", accuracy_by_epoch),
           ("learning-rate", "Learning rate", learning_rate),
           ("speed", "Speed", speed),
           ("memory", "Memory", memory),
           ("classes", "Classes", classes))
