"""What a finished or stopped run reports: its summary (the RunSummary record, summary_record.py) built from the
run, its milestones, the resume command; the words at the end are ui/ending.py's."""
from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

from fasttrain.datasets.data_source import submission_inputs
from fasttrain.telemetry.recorder import Telemetry
from fasttrain.train.loop.budget import TimeBudget
from fasttrain.train.loop.class_tally import class_report
from fasttrain.train.loop.epoch_row import EpochRow
from fasttrain.train.loop.outcome import Faults, FitResult, Interrupted
from fasttrain.train.run.summary_parts import BudgetReport, InitRecord, Milestone, StoppedAt, SubmissionInputs
from fasttrain.train.run.summary_record import RunSummary
from fasttrain.train.types import Prepared

__all__ = ["RunSummary", "budget_report", "final_verdict", "milestones", "resume_command", "run_summary",
           "with_faults", "with_stop"]


def resume_command(run_dir: Path, nodes: int = 1, per_node: int = 1, *, python: bool = False) -> str:
    """The command that continues this run; a data-parallel run needs its processes again (same world size).
    `python`: the run's model or data are Python objects handed to the API, which only Python can hand again."""
    if python:
        return f"fasttrain.train(model, data, resume={str(run_dir)!r}) in Python, with the same model and data"
    command = f"fasttrain train --resume {shlex.quote(str(run_dir))}"
    if nodes * per_node > 1:
        command += f" --nproc-per-node {per_node}"
        if nodes > 1:
            command += f" --nnodes {nodes} --node-rank R --rdzv-endpoint HOST:PORT"
    return command


def with_stop(summary: RunSummary, exc: Interrupted, command: str | None, last_good: Path | None) -> RunSummary:
    """What a stopped run reports: where it stopped, the checkpoint, the exact command that continues it (None: the
    run keeps no last.pt, checkpoint.save_last false, and cannot be resumed)."""
    if command is None:
        saved = ("no last.pt (checkpoint.save_last: false): the run cannot be resumed; its weights are in "
                 "model.safetensors")
    elif exc.checkpoint is not None:
        saved = f"checkpoint {exc.checkpoint} written"
    else:
        saved = f"no checkpoint could be written now; the last good one is {last_good}" \
            if last_good else "no checkpoint could be written"
    where = f"epoch {exc.epoch + 1}, batch {exc.batch}" if exc.batch else f"the end of epoch {exc.epoch}"
    text = (f"fasttrain: stopped by {exc.signal_name} after optimizer step {exc.step} ({where}); {saved}."
            + (f"\nfasttrain: resume with: {command}" if command else ""))
    return replace(summary, interrupted=exc.signal_name, exit_code=exc.exit_code,
                       stopped_at=StoppedAt(epoch=exc.epoch + 1, batch=exc.batch, step=exc.step),
                       checkpoint_written=str(exc.checkpoint) if exc.checkpoint else None,
                       resume_command=command, stop_message=text)


def with_faults(summary: RunSummary, faults: Faults, prep: Prepared) -> RunSummary:
    """What went wrong and was survived: unreadable files, out-of-memory back-offs, non-finite steps, checkpoints
    not written; and the batch as it ran."""
    bad = prep.bundle.bad_files()
    return replace(summary,
        bad_files=len(bad), bad_file_paths=tuple(bad[:20]), oom_backoffs=tuple(faults.oom_backoffs),
        micro_batch=faults.micro_batch, accumulation_steps=faults.accumulation_steps,
        effective_batch=prep.plan.effective_batch, nonfinite_steps=faults.nonfinite_steps,
        checkpoint_errors=tuple(faults.checkpoint_errors),
        resumed_from=str(prep.resume.path) if prep.resume is not None else None,
        last_good_checkpoint=str(faults.last_good_checkpoint) if faults.last_good_checkpoint else None)


def run_summary(prep: Prepared, result: FitResult | None, run_dir: Path, wall_s: float,
                torch: ModuleType) -> RunSummary:
    result = result or FitResult()  # stopped before fit() began
    last = result.history[-1] if result.history else EpochRow()
    # The rate of this session, like its wall time: a resumed run's history also holds the epochs before it.
    before = prep.resume.state.position.finished_epochs if prep.resume is not None else 0
    session = [r for r in result.history if r.epoch > before]
    images = sum(r.train_images for r in session)
    train_s = sum(r.train_s for r in session)
    inputs = submission_inputs(prep.args.data)  # a competition's test folder and sample
    return RunSummary(
        run_dir=str(run_dir), profile=prep.profile_ref, model=prep.model_name, data=prep.args.data,
        device=prep.plan.device, precision=prep.plan.precision, world_size=prep.plan.world_size,
        epochs_run=result.epochs_run, stopped_early=result.stopped_early,
        final_val_acc1=last.val_acc1, final_val_acc5=last.val_acc5,
        final_val_loss=last.val_loss, final_train_loss=last.train_loss,
        best_val_acc1=result.best_acc1, best_epoch=result.best_epoch,
        train_images_per_s=images / train_s if train_s else None,
        wall_s=wall_s, fit_s=result.wall_s,
        checkpoint_last=str(run_dir / "last.pt"),
        checkpoint_best=str(run_dir / "best.pt") if (run_dir / "best.pt").exists() else None,
        milestones=milestones(result.history), init=init_record(prep),
        submission_inputs=SubmissionInputs(**inputs) if inputs else None,
        # per_class, confused: which classes drag the score (the best epoch's matrix where this process has it)
        **_class_fields(class_report(result.classes, prep.bundle.class_names, result.best_epoch)),
        sanity_check=result.sanity, notes=tuple(result.notes), history=tuple(result.history),
        torch=torch.__version__, seed=prep.args.seed,
    )


def _class_fields(report: Mapping[str, Any]) -> dict[str, Any]:
    """class_tally's per-class report (summary.json's keys) as RunSummary's typed fields."""
    typed = RunSummary.from_json(report)
    return {key: getattr(typed, key) for key in report}


def init_record(prep: Prepared) -> InitRecord:
    """Where the starting weights came from: --weights' match, --pretrained's source, or weights None."""
    if prep.init is not None:
        return InitRecord.from_json(prep.init.record())
    if prep.args.weights:  # a resume: loaded when the run began, its checkpoint holds them trained since
        return InitRecord(weights=prep.args.weights, resumed=True)
    if prep.args.pretrained:
        from fasttrain.models.registry import pretrained_source
        return InitRecord(pretrained=pretrained_source(prep.model_name))
    return InitRecord()


def budget_report(budget: TimeBudget, source: str, history: Sequence[EpochRow], peak_lr: float) -> BudgetReport:
    """What a time budget bought: the budget, the time used and the margin left (seconds), where it came from,
    the epochs it held and the LR at the end as a share of the peak."""
    last_lr = history[-1].lr if history else None
    share = last_lr / peak_lr if last_lr is not None and peak_lr else None
    return BudgetReport(**budget.report(), source=source, epochs=len(history), replans=budget.replans,
                        lr_end_share=share)


# Validation accuracies whose first reaching the summary records (time to accuracy).
MILESTONES = (0.5, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99)


def milestones(history: Sequence[EpochRow]) -> tuple[Milestone, ...]:
    """When each accuracy of MILESTONES was first reached (elapsed_s: seconds from launch to the end of that epoch's
    validation; None for rows without it). Pure."""
    out = []
    for target in MILESTONES:
        row = next((r for r in history if (r.val_acc1 or 0.0) >= target), None)
        if row is not None:
            out.append(Milestone(val_acc1=target, epoch=row.epoch, elapsed_s=row.elapsed_s))
    return tuple(out)


def final_verdict(prep: Prepared, telemetry: Telemetry | None, run_s: float | None = None) -> str | None:
    """The bottleneck verdict on the run's last window of steps, for the summary; None when too few were measured."""
    if telemetry is None:
        return None
    from fasttrain.telemetry.verdict import assess
    from fasttrain.train.run.earlier_measurements import input_gain, measured_here
    verdict = assess(telemetry.snapshot(), prep.plan, prep.report, measured_here(prep), input_gain(prep), run_s)
    return None if verdict.kind == "warming-up" else verdict.text
