"""One voice: every command's advice about a speed setting comes from here, from the same measurements.

advise() says whether to suggest a setting given what was measured on this machine (store.Measurement): a
setting measured slower here is never suggested, a suggestion names the measurement behind it ("fused
optimizer: 1.20x here (bench speedups, 2026-11-24)") or says it is unmeasured. doctor, bench, estimate and
train's verdict all call it. Pure.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fasttrain.core.format import plural
from fasttrain.tuning.store import Measurement, SettingValue

LABELS = {"compile": "compile", "fused_optimizer": "fused optimizer", "channels_last": "channels_last",
          "precision": "autocast", "workers": "loader workers", "threads": "compute threads",
          "cudnn_benchmark": "cudnn.benchmark", "pin_memory": "pin_memory"}
# A ratio within this of 1.0 is noise: neither a reason to suggest nor to warn.
NOISE = 0.03


@dataclass(frozen=True)
class Advice:
    setting: str
    value: Any
    suggest: bool           # worth suggesting here
    measured: Measurement | None
    text: str               # "compile: 0.93x here (bench speedups, 2026-11-24)" or "... unmeasured here"


def describe(m: Measurement) -> str:
    label = LABELS.get(m.setting, m.setting)
    value = "" if m.value is True else f"={m.value}"
    detail = f"; {m.detail}" if m.detail else ""
    on = f" on {m.on}" if m.on else ""
    return f"{label}{value}: {m.ratio:.2f}x here ({m.source}{on}, {m.date}{detail})"


def latest(setting: str, value: SettingValue, measurements: list[Measurement]) -> Measurement | None:
    """The newest measurement of `setting` at `value` (measurements come oldest first), or of the value it was
    timed against, seen from `value` (1 / its ratio): a trial that found fp32 1.94x faster than bf16 also says
    bf16 is 0.52x here, so no command suggests bf16 back. Pure."""
    found = [m if m.value == value else seen_from(m, value) for m in measurements if m.setting == setting and (
        m.value == value or (_against(m) == value and m.ratio > 0))]
    return found[-1] if found else None


def _against(m: Measurement) -> SettingValue | None:
    return m.against if m.against is not None else (not m.value if isinstance(m.value, bool) else None)


def seen_from(m: Measurement, value: SettingValue) -> Measurement:
    """A measurement of `m.value` against `value`, told as `value` against `m.value`. Pure."""
    return replace(m, value=value, ratio=round(1 / m.ratio, 3), against=m.value,
                   detail=f"vs {LABELS.get(m.setting, m.setting)}={m.value}")


def latest_of(setting: str, measurements: list[Measurement]) -> Measurement | None:
    """The newest measurement of `setting` at any value. Pure."""
    found = [m for m in measurements if m.setting == setting]
    return found[-1] if found else None


def advise(setting: str, value: SettingValue, measurements: list[Measurement]) -> Advice:
    """Whether `setting=value` is worth suggesting here, and the words that say why. Pure."""
    m = latest(setting, value, measurements)
    if m is None:
        label = LABELS.get(setting, setting)
        return Advice(setting, value, True, None, f"{label}: unmeasured here (fasttrain bench speedups measures it)")
    return Advice(setting, value, m.ratio > 1 + NOISE, m, describe(m))


def measured_slower(setting: str, value: SettingValue, measurements: list[Measurement]) -> bool:
    m = latest(setting, value, measurements)
    return m is not None and m.ratio < 1 - NOISE


def workers_advice(measurements: list[Measurement], rule: int, cores: int) -> Advice:
    """The loader worker count doctor's recommendation and train's plan both use: the newest measurement of
    `workers` here (`bench loader`, or train's trial), at most the cores (a worker beyond them only takes a core
    from the step); without one, the rule's count, said to be unmeasured. RAM caps come after. Pure."""
    m = latest_of("workers", measurements)
    if m is None:
        return Advice("workers", rule, True, None,
                      f"loader workers={rule}: unmeasured here (fasttrain bench loader measures it)")
    value = min(int(m.value), max(cores, 0))
    capped = f"; {value} by the {plural(cores, 'core')} of this machine" if value < int(m.value) else ""
    return Advice("workers", value, True, m, describe(m) + capped)
