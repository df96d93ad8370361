"""What a finished or stopped run reports: the summary (summary.json), its milestones, the resume command; the words
at the end are ui/ending.py's."""
from __future__ import annotations

import shlex
from pathlib import Path
from types import ModuleType
from typing import Any

from fasttrain.datasets.data_source import submission_inputs
from fasttrain.telemetry.recorder import Telemetry
from fasttrain.train.loop.budget import TimeBudget
from fasttrain.train.loop.class_tally import class_report
from fasttrain.train.loop.outcome import Faults, FitResult, Interrupted
from fasttrain.train.types import Prepared


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


def interrupted_report(exc: Interrupted, command: str | None, last_good: Path | None) -> dict[str, Any]:
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
    return {"interrupted": exc.signal_name, "exit_code": exc.exit_code, "stopped_at": {
            "epoch": exc.epoch + 1, "batch": exc.batch, "step": exc.step},
            "checkpoint_written": str(exc.checkpoint) if exc.checkpoint else None,
            "resume_command": command, "stop_message": text}


def fault_report(faults: Faults, prep: Prepared) -> dict[str, Any]:
    bad = prep.bundle.bad_files()
    return {"bad_files": len(bad), "bad_file_paths": bad[:20], "oom_backoffs": faults.oom_backoffs,
            "micro_batch": faults.micro_batch, "accumulation_steps": faults.accumulation_steps,
            "effective_batch": prep.plan.effective_batch, "nonfinite_steps": faults.nonfinite_steps,
            "checkpoint_errors": faults.checkpoint_errors,
            "resumed_from": str(prep.resume.path) if prep.resume is not None else None,
            "last_good_checkpoint": str(faults.last_good_checkpoint) if faults.last_good_checkpoint else None}


def run_summary(prep: Prepared, result: FitResult | None, run_dir: Path, wall_s: float,
                torch: ModuleType) -> dict[str, Any]:
    result = result or FitResult()  # stopped before fit() began
    last = result.history[-1] if result.history else {}
    # The rate of this session, like its wall time: a resumed run's history also holds the epochs before it.
    before = prep.resume.state.position.finished_epochs if prep.resume is not None else 0
    session = [r for r in result.history if int(r.get("epoch", 0)) > before]
    images = sum(r.get("train_images", 0) for r in session)
    train_s = sum(r.get("train_s", 0.0) for r in session)
    return {
        "run_dir": str(run_dir), "profile": prep.profile_ref, "model": prep.model_name, "data": prep.args.data,
        "device": prep.plan.device, "precision": prep.plan.precision, "world_size": prep.plan.world_size,
        "epochs_run": result.epochs_run, "stopped_early": result.stopped_early,
        "final_val_acc1": last.get("val_acc1"), "final_val_acc5": last.get("val_acc5"),
        "final_val_loss": last.get("val_loss"), "final_train_loss": last.get("train_loss"),
        "best_val_acc1": result.best_acc1, "best_epoch": result.best_epoch,
        "train_images_per_s": images / train_s if train_s else None,
        "wall_s": wall_s, "fit_s": result.wall_s,
        "checkpoint_last": str(run_dir / "last.pt"),
        "checkpoint_best": str(run_dir / "best.pt") if (run_dir / "best.pt").exists() else None,
        "milestones": milestones(result.history), "init": init_record(prep),
        "submission_inputs": submission_inputs(prep.args.data),  # a competition's test folder and sample
        # per_class, confused: which classes drag the score (the best epoch's matrix where this process has it)
        **class_report(result.classes, prep.bundle.class_names, result.best_epoch),
        "sanity_check": result.sanity, "notes": result.notes, "history": result.history,
        "torch": torch.__version__, "seed": prep.args.seed,
    }


def init_record(prep: Prepared) -> dict[str, Any]:
    """Where the starting weights came from: --weights' match, --pretrained's source, or {"weights": None}."""
    if prep.init is not None:
        return prep.init.record()
    if prep.args.weights:  # a resume: loaded when the run began, its checkpoint holds them trained since
        return {"weights": prep.args.weights, "resumed": True}
    if prep.args.pretrained:
        from fasttrain.models.registry import pretrained_source
        return {"weights": None, "pretrained": pretrained_source(prep.model_name)}
    return {"weights": None}


def budget_report(budget: TimeBudget, source: str, history: list[dict[str, Any]], peak_lr: float) -> dict[str, Any]:
    """What a time budget bought: the budget, the time used and the margin left (seconds), where it came from,
    the epochs it held and the LR at the end as a share of the peak."""
    last_lr = history[-1].get("lr") if history else None
    share = last_lr / peak_lr if last_lr is not None and peak_lr else None
    return {**budget.report(), "source": source, "epochs": len(history), "replans": budget.replans,
            "lr_end_share": share}


# Validation accuracies whose first reaching the summary records (time to accuracy).
MILESTONES = (0.5, 0.8, 0.9, 0.95, 0.97, 0.98, 0.99)


def milestones(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """When each accuracy of MILESTONES was first reached: [{"val_acc1", "epoch", "elapsed_s"}] (elapsed_s: seconds
    from launch to the end of that epoch's validation; None for rows without it). Pure."""
    out = []
    for target in MILESTONES:
        row = next((r for r in history if (r.get("val_acc1") or 0.0) >= target), None)
        if row is not None:
            out.append({"val_acc1": target, "epoch": row.get("epoch"), "elapsed_s": row.get("elapsed_s")})
    return out


def final_verdict(prep: Prepared, telemetry: Telemetry | None, run_s: float | None = None) -> str | None:
    """The bottleneck verdict on the run's last window of steps, for the summary; None when too few were measured."""
    if telemetry is None:
        return None
    from fasttrain.telemetry.verdict import assess
    from fasttrain.train.run.earlier_measurements import input_gain, measured_here
    verdict = assess(telemetry.snapshot(), prep.plan, prep.report, measured_here(prep), input_gain(prep), run_s)
    return None if verdict.kind == "warming-up" else verdict.text
