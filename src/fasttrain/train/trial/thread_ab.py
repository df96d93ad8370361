"""Compute threads against loader workers on the CPU, decided by the run's own first steps (step_ab.StepAB).

With loader workers on a CPU, torch's compute threads either take every core (the workers then share cores with
them) or leave a core per worker. Which is faster depends on how much CPU the loading takes: on the built-in
images a worker is idle most of the time and every core should compute; on large JPEGs a worker needs its
core. The tuning trial times compute on random tensors, so it cannot see this contention, and a short run cannot
afford a separate trial of each split. So the run's first real steps alternate the two thread counts. Thread
counts change with torch.set_num_threads, which takes effect at the next parallel region.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import TYPE_CHECKING, Any

from fasttrain.train.trial.choice import record_first_steps
from fasttrain.train.trial.step_ab import StepAB
from fasttrain.tuning.store import Measurement

if TYPE_CHECKING:
    from fasttrain.plan import Plan
    from fasttrain.train.types import Prepared


def arms_for(plan: Plan, cores: int) -> list[int]:
    """Every core, then every core but one per worker: the two splits worth comparing. Pure."""
    return sorted({cores, max(1, cores - plan.workers)}, reverse=True)


def wanted(plan: Plan, prep: Prepared, tuning: dict[str, Any], env: dict[str, str]) -> bool:
    """On the CPU, with loader workers, when the user left workers and threads open and nothing measured the
    split yet (a trial that timed it, or a cached choice)."""
    from fasttrain.train.trial.tune import LOAD_ROW
    measured = any(row.get("candidate") == LOAD_ROW for row in tuning.get("candidates", []))
    return (plan.device == "cpu" and plan.workers > 0 and prep.report.cores > 1 and "OMP_NUM_THREADS" not in env
            and not prep.args.no_tune and not tuning.get("cached") and not measured
            and not prep.resolved.user_set("loader.num_workers"))


def hook(prep: Prepared, tuning: dict[str, Any], say: Callable[[str], None]) -> StepAB | None:
    """The A/B step hook for this run's loop (LoopOptions.before_step) when wanted, else None; its result goes to
    the dashboard and the measurement cache (doctor, bench and the next run's plan read it there)."""
    import os

    import torch

    plan, cores = prep.plan, prep.report.cores
    if not wanted(plan, prep, tuning, dict(os.environ)):
        return None
    arms = arms_for(plan, cores)
    if len(arms) < 2:
        return None

    def done(best: int, ratio: float, samples: dict[int, list[float]]) -> None:
        other = next(a for a in arms if a != best)
        say(f"tuning: {best} compute threads with {plan.workers} loader worker(s): {ratio:.2f}x the speed of "
            f"{other} over the first steps (median of {len(samples[best])} steps each)")
        record_first_steps(prep, Measurement("threads", best, round(ratio, 3), "train (first steps)",
                                             date.today().isoformat(), f"vs {other} threads"),
                           workers=plan.workers, cpu_threads=best)

    return StepAB(arms, torch.set_num_threads, done)
