"""The tuning trial: a short timed run of the candidate settings that matter on this device, before the first epoch.

What is timed is the real training step (Trainer.train_epoch) on random tensors on the device, a fresh model per
candidate, warm-up steps untimed. What is decided from the timings is tuning/decide.py's (pure): the budget (a
few percent of the planned run, a hard cap), which candidate wins, workers against compute threads. The result
is cached under the fasttrain cache (tuning/store.py, keyed by machine, model, data kind, image size, batch and
torch version), so a later run on the same machine, model and data starts from it without a trial, and is
written to the run folder (tuning.json). Only settings the profile left at its preset or default are tuned: a
value given with --set, a flag, a variable or a profile file is the user's.

Not tuned here: the OpenMP wait policy (it must be set before torch starts its thread pool, so it can only be
measured in a fresh process) and compile on the CPU (its compile time exceeds the CPU trial's hard cap; kept
as the profile has it unless bench speedups measured it).
"""
from __future__ import annotations

import dataclasses
import time
from datetime import date
from typing import TYPE_CHECKING, Any

from fasttrain.plan import Plan
from fasttrain.train.trial.choice import CHOICE_FIELDS, apply_choice, trial_key, tunable
from fasttrain.train.types import Prepared
from fasttrain.tuning import decide
from fasttrain.tuning.store import Measurement, record

if TYPE_CHECKING:
    import torch

STEPS = {"cpu": (1, 2), "cuda": (3, 8)}        # (warm-up, timed) steps per candidate
LOAD_ROW = "load one batch (0 workers)"        # the findings row that says the trial measured the split


def planned_steps(plan: Plan, epochs: int) -> int:
    return (plan.iterations_per_epoch or 0) * max(1, epochs)


class _Trial:
    """Times candidates within a budget; keeps what it measured for the findings."""

    def __init__(self, prep: Prepared):
        self.prep = prep
        self.spent = 0.0
        self.budget = 0.0
        self.step_s = 0.0
        self.compile_s = 0.0  # the plan's warm-up beyond its steps when it compiles: each candidate pays it again
        self.rows: list[dict[str, Any]] = []
        self.skipped: list[str] = []
        self.warm, self.timed = STEPS.get(prep.plan.device, STEPS["cpu"])

    def release(self) -> None:
        """After the last candidate: what a reference cycle still holds of theirs is freed, and on CUDA the cached
        blocks handed back. torch's first optimizer imports torch._dynamo, whose import keeps the calling frames
        (the first candidate's engine among them) until a collection, and the run's loop freezes what is alive
        at its start for its whole length (loop/heap.py): the candidate's weights and state would stay."""
        from fasttrain.train.loop.oom import free_device_memory
        free_device_memory(self.prep.plan.device)

    def cost(self, extra_steps: int = 0) -> float:
        return decide.candidate_cost_s(self.step_s, self.warm + self.timed + extra_steps, self.compile_s)

    def time_plan(self, plan: Plan, name: str, threads: list[int] | None = None) -> dict[int, float]:
        """Seconds per step of `plan` (at each thread count, on the same model) -> {threads: step_s}."""
        import torch

        from fasttrain.datasets.build import SyntheticBatches
        from fasttrain.models.registry import create_model
        from fasttrain.train.loop.step import StepEngine
        from fasttrain.train.loop.trainer import Trainer

        started = time.perf_counter()
        prep = self.prep
        model = create_model(prep.model_name, prep.bundle.num_classes, image_size=plan.image_size)
        engine = StepEngine.build(plan, prep.resolved.profile.optim, model, batches_per_epoch=100, oom_backoff=False)
        trainer = Trainer(engine)
        data = SyntheticBatches(plan.batch_size, plan.image_size, prep.bundle.num_classes, engine.device,
                                self.warm + self.timed)
        out: dict[int, float] = {}
        first = not self.rows  # the process's first steps also start its thread pool and kernel caches
        for n in threads or [0]:
            if n and plan.device == "cpu":
                torch.set_num_threads(n)
            warm_steps = self.warm + (1 if first else 0)
            w0 = time.perf_counter()
            trainer.train_epoch(data, 0, batches=warm_steps)
            _sync(engine.device)
            t0 = time.perf_counter()
            trainer.train_epoch(data, 0, batches=self.timed)
            _sync(engine.device)
            out[n] = (time.perf_counter() - t0) / self.timed
            warm_s = t0 - w0  # compiling happens in the first steps: what the warm-up took beyond its steps
            if first and plan.compile:
                self.compile_s = max(self.compile_s, warm_s - warm_steps * out[n])
            self.rows.append({"candidate": name, "threads": n or None, "step_s": round(out[n], 5),
                              "warmup_s": round(warm_s, 3)})
        self.spent += time.perf_counter() - started
        return out


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        import torch
        torch.cuda.synchronize(device)


def load_batch_s(prep: Prepared, plan: Plan) -> float:
    """Seconds to load one batch in the main process (0 workers): decoding and augmentation, measured."""
    from fasttrain.datasets.loaders import build_loaders

    one = dataclasses.replace(plan, workers=0, prefetch_factor=None, persistent_workers=False)
    loader, _ = build_loaders(prep.bundle, one, seed=prep.args.seed)
    it = iter(loader)
    next(it)  # the first batch opens the files' directory and warms the transforms
    t0 = time.perf_counter()
    next(it)
    return time.perf_counter() - t0


def _threads(plan: Plan, cores: int) -> int:
    return plan.cpu_threads or max(1, cores - plan.workers)


def _split_step(trial: _Trial, plan: Plan, allowed: set[str], cores: int,
                found: list[Measurement], today: str) -> Plan:
    """Workers against compute threads (CPU, data that needs loading): load time and compute per thread count,
    measured; the split is decide.pick_workers'."""
    options = decide.worker_options(plan.workers_requested, cores)
    counts = sorted({max(1, cores - w) for w in options}, reverse=True)
    if "workers" not in allowed or len(counts) < 2 or not decide.affordable(trial.spent, trial.cost(len(counts)),
                                                                            trial.budget):
        trial.skipped.append("workers vs threads: " + ("the user's setting" if "workers" not in allowed
                                                        else "over the trial budget"))
        return plan
    t0 = time.perf_counter()
    load_s = load_batch_s(trial.prep, plan)
    trial.spent += time.perf_counter() - t0
    trial.rows.append({"candidate": LOAD_ROW, "threads": None, "step_s": round(load_s, 5)})
    compute = trial.time_plan(plan, "compute", counts)
    best, splits = decide.pick_workers(load_s, compute, cores, options)
    current = next((s for s in splits if s.workers == plan.workers), None)
    for s in splits:
        if s.workers != best.workers:
            found.append(Measurement("workers", best.workers, round(s.step_s / best.step_s, 3), "train trial", today,
                                     f"vs {s.workers} workers, {s.threads} threads (predicted from load + compute)"))
    if current is not None and not decide.better(current.step_s, best.step_s):
        return plan
    return dataclasses.replace(plan, workers=best.workers, cpu_threads=best.threads)


def _flips(plan: Plan, allowed: set[str]) -> list[tuple[str, bool | str]]:
    """The one-setting changes worth timing from `plan`, most promising first."""
    cuda = plan.device == "cuda"
    out: list[tuple[str, bool | str]] = []
    if "fused_optimizer" in allowed:
        out.append(("fused_optimizer", not plan.fused_optimizer))
    if "precision" in allowed and not cuda:
        out.append(("precision", "fp32" if plan.precision == "bf16-mixed" else "bf16-mixed"))
    if "channels_last" in allowed:
        out.append(("channels_last", not plan.channels_last))
    if "cudnn_benchmark" in allowed and cuda:
        out.append(("cudnn_benchmark", not plan.cudnn_benchmark))
    return out


def run_trial(prep: Prepared, plan: Plan, epochs: int) -> tuple[Plan, dict[str, Any]]:
    """Time the candidates within the budget -> (the plan with the winners, findings for the run folder)."""
    import os

    trial = _Trial(prep)
    allowed = tunable(prep.resolved)
    cores = prep.report.cores
    today = date.today().isoformat()
    steps = planned_steps(plan, epochs)
    found: list[Measurement] = []
    if plan.device == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        plan = dataclasses.replace(plan, cpu_threads=_threads(plan, cores))
    base = trial.time_plan(plan, "the plan")
    trial.step_s = next(iter(base.values()))
    trial.budget = decide.trial_budget_s(trial.step_s, steps, plan.device)
    if plan.device == "cpu" and prep.bundle.in_memory is None and "OMP_NUM_THREADS" not in os.environ:
        plan = _split_step(trial, plan, allowed, cores, found, today)
    current = trial.step_s
    for name, value in _flips(plan, allowed):
        if not decide.affordable(trial.spent, trial.cost(), trial.budget):
            trial.skipped.append(f"{name}: over the trial budget")
            continue
        change: dict[str, Any] = {name: value}  # _flips pairs each Plan field with a value of its type
        candidate = dataclasses.replace(plan, **change)
        step_s = next(iter(trial.time_plan(candidate, f"{name}={value}").values()))
        baseline = getattr(plan, name)
        found.append(Measurement(name, value, round(current / step_s, 3), "train trial", today,
                                 f"vs {name}={baseline}", against=baseline))
        if decide.better(current, step_s):
            plan, current = candidate, step_s
    trial.release()
    if "compile" in allowed and not plan.compile:
        trial.skipped.append("compile: its compile time is not affordable in the trial; "
                             "`fasttrain bench speedups` measures it")
    choice = {k: getattr(plan, k) for k in CHOICE_FIELDS}
    findings = {"date": today, "spent_s": round(trial.spent, 2), "budget_s": round(trial.budget, 2),
                "compile_s": round(trial.compile_s, 2),
                "planned_steps": steps, "planned_run_s": round(trial.step_s * steps, 1),
                "candidates": trial.rows, "skipped": trial.skipped, "choice": choice,
                "measurements": [m.to_dict() for m in found]}
    try:
        record(trial_key(prep), measurements=found, choice=choice, trial=findings)
    except Exception as exc:
        findings["cache_error"] = str(exc)
    return plan, findings


def forecast_for_run(prep: Prepared) -> dict[str, Any] | None:
    """The `estimate` forecast for this run, set beside the measured figures on the dashboard. It only informs:
    any failure (an unusual model, a missing GPU spec) means no forecast, never a failed run."""
    try:
        from fasttrain.estimate.gather import Request, forecast_for
        req = Request(model=prep.model_name, num_classes=prep.bundle.num_classes,
                      dataset_size=prep.bundle.train_size, dataset_size_source="data", epochs_flag=None,
                      image_size_flag=None, sets=[], gpu=None, loader=None,
                      in_memory=prep.bundle.in_memory if prep.plan.in_memory else None,  # its threads: every core
                      val_size=prep.bundle.val_size)
        # The device that runs is this machine's: a kaggle-t4 run on a CPU is forecast for the CPU, not the T4.
        fc, target = forecast_for(prep.resolved.profile, req, prep.report, estimate_loader=False, force_local=True,
                                  quick=True)
    except Exception:
        return None
    if target.plan.device != prep.plan.device:  # a GPU with no published peaks would be priced as this CPU
        return None
    out = {"device": prep.plan.device, "images_per_s": fc.speed.get("images_per_s"),
           "step_time_s": fc.speed.get("step_time_s")}
    if prep.plan.device == "cuda":
        out["peak_memory_bytes"] = fc.memory.total
    return {k: v for k, v in out.items() if v is not None} or None


def no_trial_reason(prep: Prepared, forecast_step_s: float | None) -> str | None:
    """Why this run (not cached) starts without a trial, or None: what the run does and what --dry-run says."""
    steps = planned_steps(prep.plan, prep.resolved.profile.optim.epochs)
    reason = decide.skip_reason(steps, no_tune=prep.args.no_tune, cached=False,
                                distributed=prep.world is not None or prep.plan.world_size > 1)
    if reason is None and prep.bundle.kind == "custom":
        reason = "a custom dataset's samples are not images the trial can make"
    if reason is None and forecast_step_s:
        reason = decide.unaffordable(forecast_step_s, steps, prep.plan.device,
                                    *STEPS.get(prep.plan.device, STEPS["cpu"]))
    return reason


def tune_prepared(prep: Prepared, forecast_step_s: float | None = None) -> tuple[Prepared, dict[str, Any]]:
    """Before the first epoch: the cached choice (already applied by setup/prepare.py), or a trial, or the reason
    there is none -> (prep with the tuned plan, findings for the dashboard and the run folder)."""
    if prep.tuning:
        return prep, {"cached": True, **prep.tuning}
    reason = no_trial_reason(prep, forecast_step_s)
    if reason is not None:
        return prep, {"skipped": reason}
    before = prep.plan
    plan, findings = run_trial(prep, before, prep.resolved.profile.optim.epochs)
    why = (f"trial of {findings['spent_s']:.1f} s (budget {findings['budget_s']:.1f} s, "
           f"{findings['spent_s'] / max(findings['planned_run_s'], 1e-9):.0%} of the planned run)")
    plan = apply_choice(before, findings["choice"], tunable(prep.resolved), prep.resolved.profile, why)
    return dataclasses.replace(prep, plan=plan), findings


