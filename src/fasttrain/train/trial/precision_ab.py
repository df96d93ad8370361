"""bf16 autocast against fp32 on the CPU, decided by the run's own first steps (step_ab.StepAB).

bf16 autocast is the `cpu` preset's precision because it is faster on CPUs with AVX512-BF16 or AMX for most
models (tiny_cnn 1.68x, resnet18 1.21x a step here), but not for every model: oneDNN's bf16 depthwise
convolutions are slow, so efficientnet_b0 ran at 0.48x and convnext_atto at 0.93x of fp32 (docs/benchmarks.md).
The tuning trial measures this where a run can afford it (2% of a CPU run: about a minute of planned training);
a shorter run alternates the two over its first real steps instead, each arm's first step untimed (oneDNN builds
its kernels for the new dtype there), and keeps the faster. Both have no loss scaler, so a switch between steps
changes nothing but the speed and the rounding.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import TYPE_CHECKING, Any

from fasttrain.core.format import fmt_number
from fasttrain.train.trial.choice import record_first_steps
from fasttrain.train.trial.step_ab import StepAB
from fasttrain.tuning import decide
from fasttrain.tuning.store import Measurement

if TYPE_CHECKING:
    from fasttrain.train.loop.precision import Precision
    from fasttrain.train.types import Prepared

ARMS = ["bf16-mixed", "fp32"]
WARM_EACH = 1   # untimed steps of the second arm before its first timed one (its kernels are built there)


def wanted(prep: Prepared, tuning: dict[str, Any], planned_steps: int | None) -> bool:
    """On the CPU, with the plan at bf16 autocast that the user did not set, when no trial measured the precision
    (it was skipped as too short, or had no budget left for it), no cached choice holds one, and the run plans at
    least decide.AB_MIN_STEPS steps (None: a time budget, planned as it goes)."""
    from fasttrain.train.trial.choice import tunable
    plan = prep.plan
    if planned_steps is not None and planned_steps < decide.AB_MIN_STEPS:
        return False
    measured = any(str(row.get("candidate", "")).startswith("precision=") for row in tuning.get("candidates", []))
    return (plan.device == "cpu" and plan.precision == "bf16-mixed" and "precision" in tunable(prep.resolved)
            and not prep.args.no_tune and not tuning.get("cached") and not measured)


def hook(prep: Prepared, tuning: dict[str, Any], precision: Precision, say: Callable[[str], None], *,
         planned_steps: int | None) -> StepAB | None:
    """The A/B step hook for this run's loop when wanted, else None. `precision`: the step engine's, switched in
    place; the result goes to the dashboard, the summary (`precision`) and the measurement cache (the next run
    with this machine, model and data starts at the winner, and `doctor`/the verdict read the measurement)."""
    if not wanted(prep, tuning, planned_steps):
        return None

    def done(best: str, ratio: float, samples: dict[str, list[float]]) -> None:
        other = next(a for a in ARMS if a != best)
        ms = {a: 1000 * s for a, s in decide.arm_medians(samples).items()}
        kept = "kept" if best == prep.plan.precision else f"instead of {other}"
        steps = ", ".join(f"{fmt_number(ms[a], 3)} ms a step in {a}" for a in ARMS if a in ms)
        say(f"tuning: {best} {kept}: {steps} (median of {len(samples[best])} steps each; fp32 must be "
            f"{decide.PRECISION_SWITCH_MARGIN:.0%} faster to replace bf16; --set speed.precision=... decides it "
            "yourself)")
        record_first_steps(prep, Measurement("precision", best, round(ratio, 3), "train (first steps)",
                                             date.today().isoformat(), f"vs {other}", against=other),
                           precision=best)

    return StepAB(list(ARMS), precision.use, done, warm_each=WARM_EACH, margin=decide.PRECISION_SWITCH_MARGIN)
