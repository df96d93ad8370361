"""The tuning trial's decisions, as pure functions of recorded timings (tested with recorded numbers).

- The budget: the trial may spend at most TRIAL_FRACTION of the planned run (by device), and never more than the
  device's hard cap; a run shorter than MIN_STEPS is not worth a trial at all.
- A candidate replaces the current setting only when it is faster by more than KEEP_MARGIN (timing noise on a
  busy machine would otherwise flip settings at random).
- compile is kept only when its measured per-step saving times the planned steps exceeds its measured compile
  time.
- Loader workers against compute threads: each worker takes a core from the compute threads; the step time of
  each split is predicted from the measured time to load a batch and the measured compute time at that many
  threads, and the fastest split wins.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Of the planned run, by device. On a CPU the plan's precision already follows the CPU's flags (bf16 only with
# AVX512-BF16/AMX) and the cpu preset's other settings were measured by `bench speedups`: every CPU trial recorded
# in docs/benchmarks.md ("Time to accuracy") kept the plan, and at 5% it cost 0.9-1.4 s, 5-8% of fasttrain's time
# to the target on scikit-image's photographs. 2% keeps it for runs of a minute or more (the choice is cached, so
# later runs on the machine start from it). A GPU's candidates (cudnn benchmark, channels_last, the precision on
# older cards) move its step time more.
TRIAL_FRACTION = {"cpu": 0.02, "cuda": 0.05}
HARD_CAP_S = {"cpu": 20.0, "cuda": 60.0}       # whatever the run's length
MIN_STEPS = 60                                 # fewer optimizer steps than this: the trial cannot repay itself
KEEP_MARGIN = 0.04                             # a candidate must be this much faster to replace the current
WORKER_OVERHEAD = 1.05                         # a worker's batch crosses a process boundary (pickling, queues)
CANDIDATE_SETUP_S = 0.2                        # building a candidate's model and trainer (resnet18 on a CPU)


def trial_budget_s(step_s: float, planned_steps: int, device: str) -> float:
    """Seconds the trial may spend: TRIAL_FRACTION of the planned run (step_s x planned_steps), at most the
    device's hard cap. Pure."""
    cap = HARD_CAP_S.get(device, HARD_CAP_S["cpu"])
    return max(0.0, min(fraction(device) * step_s * max(planned_steps, 0), cap))


def fraction(device: str) -> float:
    """The share of the planned run a trial may spend on this device. Pure."""
    return TRIAL_FRACTION.get(device, TRIAL_FRACTION["cpu"])


def skip_reason(planned_steps: int, *, no_tune: bool, cached: bool, distributed: bool) -> str | None:
    """Why no trial runs (None: run it). Pure."""
    if no_tune:
        return "--no-tune"
    if cached:
        return "measured before on this machine (cached)"
    if distributed:
        return "several processes: each would time the others' load"
    if planned_steps < MIN_STEPS:
        return f"the run is too short to repay a trial ({planned_steps} steps < {MIN_STEPS})"
    return None


def candidate_cost_s(step_s: float, steps: int, compile_s: float = 0.0) -> float:
    """Seconds one trial candidate costs: its steps, ~20% more for the fresh model's first (slower) step and the
    trainer around it, CANDIDATE_SETUP_S to build them, and `compile_s` when it compiles (each candidate is a
    fresh model, compiled again: tens of seconds on a GPU, more than the steps). Pure."""
    return steps * step_s * 1.2 + CANDIDATE_SETUP_S + compile_s


def unaffordable(forecast_step_s: float, planned_steps: int, device: str, warm: int, timed: int) -> str | None:
    """Why a trial is not worth starting, from the forecast step time: timing the plan (its warm-up, one more
    warm-up step that starts the process's thread pool and kernel caches, and its timed steps) and one candidate
    after it would take more than the whole budget -> the reason, else None. The same cost model as the trial's
    own budget check (train/trial/tune.py), so a trial that starts expects to time at least one candidate. Pure.
    Recorded: resnet18 at 64 px on the 2-core VM, 0.198 s steps, 156 planned steps: the plan alone took 1.08 s of
    a 1.55 s budget and nothing else fitted, so that trial learnt nothing."""
    budget = trial_budget_s(forecast_step_s, planned_steps, device)
    two = candidate_cost_s(forecast_step_s, warm + 1 + timed) + candidate_cost_s(forecast_step_s, warm + timed)
    if two > budget:  # the plan and at least one candidate, or nothing is learnt
        return (f"the run is too short to repay a trial (two candidates ~{two:.1f} s, the budget is "
                f"{fraction(device):.0%} of a ~{forecast_step_s * planned_steps:.0f} s run)")
    return None


def affordable(spent_s: float, next_cost_s: float, budget_s: float) -> bool:
    """Whether one more candidate, expected to cost next_cost_s, still fits the budget. Pure."""
    return spent_s + next_cost_s <= budget_s


def better(current_s: float, candidate_s: float, margin: float = KEEP_MARGIN) -> bool:
    """A candidate's step time beats the current one by more than the noise margin. Pure."""
    return candidate_s > 0 and current_s > 0 and candidate_s < current_s * (1 - margin)


def compile_pays(eager_step_s: float, compiled_step_s: float, compile_s: float, planned_steps: int) -> bool:
    """compile is worth it when its per-step saving over the planned steps exceeds its compile time. Pure."""
    return (eager_step_s - compiled_step_s) * planned_steps > compile_s


@dataclass(frozen=True)
class Split:
    workers: int
    threads: int
    step_s: float       # predicted seconds per batch


def predict_split(workers: int, threads: int, load_s: float, compute_s: float) -> Split:
    """0 workers: the main process loads, then computes (serial). w workers: they load in parallel with the
    compute, so the slower of the two sets the pace. Pure."""
    if workers == 0:
        return Split(0, threads, load_s + compute_s)
    return Split(workers, threads, max(load_s * WORKER_OVERHEAD / workers, compute_s))


def pick_workers(load_s: float, compute_s_by_threads: dict[int, float], cores: int,
                 worker_options: list[int]) -> tuple[Split, list[Split]]:
    """The fastest split of the cores between loader workers and compute threads (threads = cores - workers,
    at least 1), from the measured time to load one batch in one process and the measured compute time per
    batch at each thread count -> (best, every split considered). Splits whose thread count was not measured
    are left out. Pure."""
    splits = []
    for workers in sorted(set(worker_options)):
        threads = max(1, cores - workers)
        if threads in compute_s_by_threads:
            splits.append(predict_split(workers, threads, load_s, compute_s_by_threads[threads]))
    if not splits:
        raise ValueError("no measured thread count matches a worker option")
    return min(splits, key=lambda s: (s.step_s, s.workers)), splits


def worker_options(asked: int, cores: int) -> list[int]:
    """The worker counts worth timing: none, the profile's, and one; never all the cores (compute needs one). Pure."""
    top = max(0, cores - 1)
    return sorted({0, min(1, top), min(asked, top)})


# Online A/B over a run's first real steps (train/trial/step_ab.py: compute threads, CPU precision): the steps
# train, so the measurement costs no extra work. WARM steps first (the loader's workers start, oneDNN picks its
# kernels), then the arms alternate step by step, PER_ARM steps each: alternating keeps a drift of the machine's
# load out of the comparison, and the median of each arm ignores a step that met a slow batch. An arm that needs
# its own kernels (another dtype: oneDNN builds them on the first call) gets WARM_EACH untimed steps of its own.
AB_WARM_STEPS = 2
AB_PER_ARM = 4
AB_MIN_STEPS = 100   # a precision A/B (~11 steps) in a shorter run would be a tenth of it or more, for nothing
# fp32 replaces the preset's bf16 only when clearly faster: resnet18 at 32 px here is 1.16-1.21x faster in bf16,
# yet one 4-step A/B on a busy machine read fp32 1.07x faster; the models it is for are 1.8x faster in fp32.
PRECISION_SWITCH_MARGIN = 0.15


def ab_schedule(arms: list[Any], warm: int = AB_WARM_STEPS, per_arm: int = AB_PER_ARM,
                warm_each: int = 0) -> tuple[list[Any], int]:
    """The arm of each of the first steps, and how many of them are untimed warm-up: the first arm `warm` times,
    each other arm `warm_each` times, then the arms in turn. Pure."""
    untimed = [arms[0]] * warm + [a for a in arms[1:] for _ in range(warm_each)]
    return untimed + [arms[k % len(arms)] for k in range(per_arm * len(arms))], len(untimed)


AB_CLEAR_GAP = 1.15   # every step of one arm this much slower than every step of the other: no need to go on


def ab_settled(samples: dict[Any, list[float]], min_each: int = 2, gap: float = AB_CLEAR_GAP) -> bool:
    """The A/B can stop early: each arm has min_each steps and one arm's slowest step beats the other's fastest
    by more than `gap` (the slower arm's remaining steps would only cost time). Pure."""
    timed = [v for v in samples.values() if v]
    if len(timed) < 2 or any(len(v) < min_each for v in timed):
        return False
    fastest_worst = min(max(v) for v in timed)
    return all(min(v) > fastest_worst * gap for v in timed if max(v) != fastest_worst)


def arm_medians(samples: dict[Any, list[float]]) -> dict[Any, float]:
    """Each timed arm's median step time (seconds). Pure."""
    return {arm: sorted(v)[len(v) // 2] for arm, v in samples.items() if v}


def pick_arm(samples: dict[Any, list[float]], current: Any, margin: float = KEEP_MARGIN) -> tuple[Any, float]:
    """The arm (a thread count, a precision) whose median step time is lowest, kept over `current` only when it
    is faster by more than the noise margin -> (arm, how many times faster it is than the slowest arm). Pure."""
    medians = arm_medians(samples)
    if not medians:
        return current, 1.0
    best = min(medians, key=lambda t: (medians[t], t))  # arms of one kind: ints or names
    if current in medians and not better(medians[current], medians[best], margin):
        best = current
    return best, max(medians.values()) / medians[best] if medians[best] > 0 else 1.0
