"""The end of a run in words: what it reached, where its files are, and the commands that come next.

Pure: the run's summary (RunSummary, train/run/summary_record.py) -> (label, value) rows, drawn by the dashboard
in every mode. One time format throughout (h:mm:ss, core/format.fmt_clock). On a terminal the lines are broken
between words only (ui/wrap.py), a command's lines ending in a backslash so that, copied together, they still run;
off a terminal each row is one line.
"""
from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING, Any

from fasttrain.core.format import fmt_bytes, fmt_clock, fmt_number, plural, short_name
from fasttrain.ui.wrap import wrap_command, wrap_words

if TYPE_CHECKING:
    from fasttrain.train.run.summary_record import RunSummary

LABEL_WIDTH = 16
# Rows whose value is a command to copy: broken between its words with ` \`, never inside one.
COMMAND_ROWS = ("resume", "TensorBoard", "train further", "predict")


def _pct(value: Any) -> str:
    return f"{value:.1%}" if isinstance(value, (int, float)) and value <= 1 else fmt_number(value)


def _accuracy(s: RunSummary) -> str | None:
    if s.final_val_acc1 is None and s.best_val_acc1 is None:
        return None
    text = f"acc@1 {_pct(s.final_val_acc1)}"
    if s.final_val_acc5 is not None:
        text += f", acc@5 {_pct(s.final_val_acc5)}"
    if s.best_val_acc1 is not None:
        text += f" (best acc@1 {_pct(s.best_val_acc1)}" + (f" at epoch {s.best_epoch})" if s.best_epoch else ")")
    return text


def _problems(s: RunSummary) -> str | None:
    found = []
    for count, what in ((s.bad_files, "unreadable files skipped"), (s.nonfinite_steps, "non-finite steps skipped")):
        if count:
            found.append(f"{count:,} {what}")
    if s.oom_backoffs:
        found.append(f"{len(s.oom_backoffs)} out-of-memory back-off(s), micro-batch {s.micro_batch}")
    if s.checkpoint_errors:
        found.append(f"{len(s.checkpoint_errors)} checkpoint(s) not written (summary.json: checkpoint_errors)")
    if s.thread_changes:  # a busy machine: the images/s are not this machine's alone
        fewest = min(int(c["threads"]) for c in s.thread_changes)
        found.append(f"other processes took cores: compute threads down to {fewest} at times "
                     "(summary.json: thread_changes)")
    return "; ".join(found) or None


def _time(s: RunSummary) -> str | None:
    if s.wall_s is None:
        return None
    text = fmt_clock(s.wall_s)
    if s.resumed_from:
        text += " this session, since the resume"
        clock = s.resumed_clock
        if clock is not None and clock.run_s is not None:  # the run's clock: the time trained before the stop counts
            text += f"; {fmt_clock(clock.run_s)} in all"
        if clock is not None and clock.stopped_s is not None:
            text += f", after a stop of {fmt_clock(clock.stopped_s)}"
        return text
    # wall_s starts with the run; the epochs' elapsed_s (and so the time to accuracy) with the command
    launched = next((r.elapsed_s for r in reversed(s.history) if r.elapsed_s), None)
    if launched is not None and launched - s.wall_s >= 1:
        text += f" training ({fmt_clock(launched)} since the command started)"
    return text


def _time_to_accuracy(s: RunSummary) -> str | None:
    """summary.json's milestones in one line: "90% at 0:00:12 (epoch 2), 95% at 0:00:18 (epoch 3)"."""
    parts = [f"{m.val_acc1:.0%} at {fmt_clock(m.elapsed_s, '?')} (epoch {m.epoch})" for m in s.milestones]
    return ", ".join(parts) or None


def _budget(s: RunSummary) -> str | None:
    """The time budget (--time-budget, --deadline, --max-cost): what it was, what the run used, the margin."""
    b = s.time_budget
    if b is None:
        return None
    head = f"{fmt_clock(b.budget_s)} ({b.source or 'budget'}): used {fmt_clock(b.used_s)}"
    margin = b.margin_s
    if margin is None:
        return head
    return head + (f", {fmt_clock(margin)} left" if margin >= 0 else f", over by {fmt_clock(-margin)}")


# The width a value of the class rows keeps to: 80 columns less the dashboard's indent and the label.
CLASS_ROW_WIDTH = 80 - 2 - LABEL_WIDTH - 1
CONFUSED_ROWS = 3


def _worst_classes(s: RunSummary) -> str | None:
    """The classes that drag acc@1 down, worst first, and the epoch the figures are of: "worst Shirt 61.0%,
    Pullover 78.0% at best epoch 3"; as many as fit CLASS_ROW_WIDTH. summary.json's per_class is in class order."""
    classes = s.per_class
    if not classes:
        return s.per_class_note
    scored = sorted((c.accuracy, i, c.name) for i, c in enumerate(classes) if c.accuracy is not None)
    epoch = s.per_class_epoch
    when = f" at best epoch {epoch}" if s.per_class_basis == "best" else f" at epoch {epoch} (the last)"
    if scored and scored[0][0] >= 1:
        return f"every class {_pct(1.0)}{when}"
    shown = [f"{short_name(name)} {_pct(acc)}" for acc, _, name in scored[:3] if acc < 1]
    while len(shown) > 1 and len("worst " + ", ".join(shown) + when) > CLASS_ROW_WIDTH:
        shown.pop()
    return "worst " + ", ".join(shown) + when if shown else None


def _confused(s: RunSummary) -> list[str]:
    """The most frequent mistakes, one a line: "Shirt seen as T-shirt: 14 of 120 (12%)"."""
    images = {c.name: c.images for c in s.per_class or ()}
    lines = []
    for pair in (s.confused or ())[:CONFUSED_ROWS]:
        of = images.get(pair.true)
        tail = f": {pair.count:,}" + (f" of {of:,}" if of else "") + f" ({pair.share:.0%})"
        room = max(8, (CLASS_ROW_WIDTH - len(" seen as ") - len(tail)) // 2)
        lines.append(f"{short_name(pair.true, room)} seen as {short_name(pair.predicted, room)}{tail}")
    return lines


def _init(s: RunSummary) -> str | None:
    """summary.json's "init" after "started from": "weights pre.pth (100 of 102 tensors loaded)"; None from
    scratch."""
    init = s.init
    if init.weights:
        counts = f" ({init.loaded} of {init.of} tensors loaded)" if init.of else ""
        return f"weights {init.weights}{counts}"
    return f"pretrained weights {init.pretrained}" if init.pretrained else None


def _speed(s: RunSummary) -> str | None:
    rate = s.train_images_per_s
    return None if rate is None else f"{fmt_number(rate)} images/s while training"


def ending_rows(s: RunSummary) -> list[tuple[str, str]]:
    """(label, value) rows of the run's end, in reading order; rows without a value are left out."""
    run = s.run_dir
    quoted = shlex.quote(run) if run else None
    epochs = s.epochs_run
    rows: list[tuple[str, str | None]] = [
        ("run folder", run),
        ("stopped", (s.stop_message or "").split("\n")[0].removeprefix("fasttrain: ") or None),
        ("epochs", None if epochs is None else f"{epochs}" + (" (stopped early: acc@1 stopped improving)"
                                                                if s.stopped_early else "")),
        ("started from", _init(s)),
        ("accuracy", _accuracy(s)),
        ("time to accuracy", _time_to_accuracy(s)),
        ("class accuracy", _worst_classes(s)),
        *[("confused" if i == 0 else "", line) for i, line in enumerate(_confused(s))],
        ("loss", None if s.final_train_loss is None else
         f"train {fmt_number(s.final_train_loss)}, val {fmt_number(s.final_val_loss)}"),
        ("speed", _speed(s)),
        ("time", _time(s)),
        ("time budget", _budget(s)),
        ("verdict", s.verdict),
        ("problems", _problems(s)),
        ("best weights", None if str(s.model_files).startswith(str(s.checkpoint_best))
         else s.checkpoint_best),  # model.safetensors: the model files' row names it
        ("model files", s.model_files),
        ("last checkpoint", s.checkpoint_last),
        ("checkpoints", _on_disk(s)),
        ("resume", s.resume_command),
        ("TensorBoard", f"tensorboard --logdir {shlex.quote(run + '/tb')}" if run else None),
        *(_further(s, quoted, epochs) if quoted and epochs and not s.resume_command
          and _resumable(s) else []),
        ("predict", _predict(s, quoted) if quoted and s.model_files else None),
    ]
    return [(label, str(value)) for label, value in rows if value]


def _resumable(s: RunSummary) -> bool:
    """The run keeps a last.pt to train further from: checkpoint_last names it, or the summary does not say what is
    on disk (a summary of an earlier fasttrain); None beside the files on disk: no last.pt (--no-last)."""
    return s.checkpoint_last is not None or not s.checkpoint_bytes


def _on_disk(s: RunSummary) -> str | None:
    """What the run's checkpoint files weigh: `179 MiB on disk: last.pt 134 MiB, model.safetensors 43 MiB`."""
    files = s.checkpoint_bytes
    shown = ", ".join(f"{name} {fmt_bytes(size)}" for name, size in files.items() if name != "model.json")
    return f"{fmt_bytes(sum(files.values()))} on disk: {shown}" if shown else None


def _epoch_s(s: RunSummary) -> float | None:
    """Seconds a whole epoch took (training and validation): the median over the history's epochs that saw every
    training image (a budget's last epoch may end early)."""
    rows = [r for r in s.history if r.train_images]
    most = max((r.train_images for r in rows), default=0)
    times = sorted(r.train_s + (r.val_s or 0.0) for r in rows if r.train_images == most)
    return times[len(times) // 2] if times else None


def _flag_duration(seconds: float) -> str:
    """Seconds as --time-budget reads them, whole and rounded up: 52s, 4m, 1h2m5s."""
    left = math.ceil(seconds)
    parts = [(left // 3600, "h"), (left % 3600 // 60, "m"), (left % 60, "s")]
    return "".join(f"{n}{unit}" for n, unit in parts if n) or "1s"


def _usd(source: str) -> float | None:
    """The dollars of a `--max-cost 2.5 USD` budget source (budget_args.budget_seconds), or None."""
    try:
        return float(source.split()[1])
    except (IndexError, ValueError):
        return None


def _further(s: RunSummary, quoted: str, epochs: int) -> list[tuple[str, str | None]]:
    """The command that trains this run further, and in words what it buys at this run's pace. A budgeted run's
    checkpoint keeps its budget, all spent: `--epochs` alone would train one step and stop (issue 43), so it gets a
    budget for the whole run again, the time it used plus as much more."""
    pace = _epoch_s(s)
    b = s.time_budget
    if b is None or not b.budget_s:
        words = f"{epochs} more epochs" + (f", about {fmt_clock(epochs * pace)} at this run's pace" if pace else "")
        return [("train further", f"fasttrain train --resume {quoted} --epochs {2 * epochs}"), ("", words)]
    more_s, source = float(b.budget_s), b.source or "--time-budget"
    if source.startswith("--deadline"):
        flag, words = "--deadline HH:MM", "a later time of day: the deadline is a clock time"
    elif source.startswith("--max-cost") and (usd := _usd(source)) is not None:
        flag, words = f"--max-cost {2 * usd:g}", f"the cost counts the whole run: {usd:g} USD more"
    else:
        total = float(b.used_s or 0.0) + more_s
        flag = f"--time-budget {_flag_duration(total)}"
        words = f"the budget counts the whole run: {fmt_clock(more_s)} more"
    if pace and not source.startswith("--deadline"):
        words += f", about {plural(max(1, int(more_s // pace)), 'epoch')} at this run's pace"
    return [("train further", f"fasttrain train --resume {quoted} {flag}"), ("", words)]


def _predict(s: RunSummary, quoted: str) -> str:
    """The predict command for this run: a competition's submission when its test images and sample submission sit
    beside the table it trained on (summary's submission_inputs), else images of your own."""
    found = s.submission_inputs
    if found is None:
        return f"fasttrain predict {quoted} --data DIR"
    return (f"fasttrain predict {quoted} --data {shlex.quote(found.test_images)} --out submission.csv "
            f"--sample-submission {shlex.quote(found.sample_submission)}")


def ending_lines(s: RunSummary, width: int | None = None) -> list[str]:
    """The rows as plain lines, `label            value`; with `width` (a terminal's columns) each value broken
    between words to fit, its lines after the first under the value's column."""
    lines = []
    for label, value in ending_rows(s):
        head = f"{label:<{LABEL_WIDTH}} "
        if width is None:
            lines.append(head + value)
            continue
        wrap = wrap_command if label in COMMAND_ROWS else wrap_words
        parts = wrap(value, max(20, width - len(head)), len(head))
        lines += [head + parts[0], *parts[1:]]
    return lines


def run_state(s: RunSummary) -> tuple[str, str | None]:
    """How the run ended, for the dashboard's last frame: ("stopped", None) for a stop request (it can resume), else
    ("done", why the last epoch may have ended before its last batch: the time budget, early stopping, or None)."""
    if s.stop_message or s.resume_command:
        return "stopped", None
    if s.stopped_early:
        return "done", "stopped early"
    return "done", "time budget" if s.time_budget is not None else None
