"""What the tuning trial may change and how its choice becomes the plan: the settings the user left open, the
cache key of a trial, a cached choice applied without a trial (or kept by the first steps' A/Bs), and the one
line that says what was measured."""
from __future__ import annotations

import dataclasses
from typing import Any

from fasttrain.plan import Plan
from fasttrain.profiles.presets import Resolved
from fasttrain.profiles.schema import Profile
from fasttrain.train.types import Prepared
from fasttrain.tuning.store import Measurement, TrialKey, lookup, machine_id, record

# Settings the trial may change, with the profile key whose provenance says whether the user chose it.
TUNABLE = {"workers": "loader.num_workers", "precision": "speed.precision", "channels_last": "speed.channels_last",
           "fused_optimizer": "speed.fused_optimizer", "cudnn_benchmark": "speed.cudnn_benchmark",
           "compile": "speed.compile"}
CHOICE_FIELDS = ("workers", "cpu_threads", "precision", "channels_last", "fused_optimizer", "cudnn_benchmark",
                 "compile")


def tunable(resolved: Resolved) -> set[str]:
    """Trial settings the user left to the preset or the default (a flag, --set, a variable or a profile file
    makes a value the user's). Pure."""
    return {name for name, key in TUNABLE.items() if not resolved.user_set(key)}


def trial_key(prep: Prepared) -> TrialKey:
    return TrialKey(
        machine=machine_id(prep.report),
        model=prep.model_name,
        data_kind="images-in-ram" if prep.bundle.decoded_in_ram else prep.bundle.kind,  # no workers: another split
        image_size=prep.plan.image_size,
        batch=prep.plan.batch_size,
        torch=prep.report.torch.version or "unknown",
    )


def apply_choice(plan: Plan, choice: dict[str, Any], allowed: set[str], profile: Profile, why: str) -> Plan:
    """The plan with the trial's choice for the settings the user left open; a note says what changed. Pure."""
    changes: dict[str, Any] = {}
    for name in CHOICE_FIELDS:
        gate = "workers" if name == "cpu_threads" else name
        if name in choice and gate in allowed and getattr(plan, name) != choice[name]:
            changes[name] = choice[name]
    if plan.device != "cpu":
        changes.pop("cpu_threads", None)
    if not changes:
        return dataclasses.replace(plan, notes=[*plan.notes, f"tuning: {why}; the plan's settings were fastest"])
    if "workers" in changes:
        workers = changes["workers"]
        changes.update(
            workers_reason="measured by the tuning trial",
            prefetch_factor=profile.loader.prefetch_factor if workers else None,
            persistent_workers=profile.loader.persistent_workers and workers > 0,
        )
    if "compile" in changes:
        changes["compile_reason"] = "measured by the tuning trial"
    said = ", ".join(f"{k} {_shown(getattr(plan, k))} -> {_shown(v)}" for k, v in changes.items() if k in CHOICE_FIELDS)
    return dataclasses.replace(plan, **changes, notes=[*plan.notes, f"tuning: {why}: {said}"])


def _shown(value: object) -> str:
    """A setting's value in a note: None (cpu_threads: cores minus loader workers; prefetch: torch's) is `auto`."""
    return "auto" if value is None else str(value)


def apply_cached(prep: Prepared) -> tuple[Plan, dict[str, Any] | None]:
    """The plan with a cached trial's choice for this machine, model and data (no trial runs) -> (plan, entry)."""
    if prep.args.no_tune or prep.world is not None:
        return prep.plan, None
    entry = lookup(trial_key(prep))
    if not entry or not isinstance(entry.get("choice"), dict):
        return prep.plan, None
    when = (entry.get("trial") or {}).get("date", "an earlier run")
    plan = apply_choice(
        prep.plan,
        entry["choice"],
        tunable(prep.resolved),
        prep.resolved.profile,
        f"measured on this machine ({when}, cached)",
    )
    return plan, entry


def tuning_line(findings: dict[str, Any] | None) -> str:
    """One line for the dashboard and --dry-run. Pure."""
    if not findings:
        return "not measured yet: the run times the candidate settings first (a few % of the run, capped)"
    if isinstance(findings.get("skipped"), str):  # no trial ran; a trial's own "skipped" is a list, said below
        return f"skipped: {findings['skipped']}"
    skipped = (
        "; skipped " + ", ".join(s.split(":")[0] for s in findings.get("skipped", []))
        if findings.get("skipped")
        else ""
    )
    spent = findings.get("spent_s", (findings.get("trial") or {}).get("spent_s"))
    when = findings.get("date", (findings.get("trial") or {}).get("date"))
    if spent is None:  # no trial: a choice the first steps' A/Bs of an earlier run measured (threads, precision)
        dates = [m["date"] for m in findings.get("measurements", []) if isinstance(m, dict) and m.get("date")]
        head = f"measured {when or (max(dates) if dates else 'earlier')} in an earlier run's first steps"
    else:
        head = f"measured {when or '?'} in {spent} s"
    cached = " (cached: no trial this run)" if findings.get("cached") else ""
    return (
        f"{head}{cached}: " + ", ".join(f"{k}={_shown(v)}" for k, v in (findings.get("choice") or {}).items()) + skipped
    )


def record_first_steps(prep: Prepared, measurement: Measurement, **choice: Any) -> None:
    """Keep what an A/B of the first steps measured (train/trial/step_ab.py) in the measurement cache, with its
    choice merged into the cached one, so the next run on this machine, model and data starts there without it."""
    try:
        key = trial_key(prep)
        merged = dict((lookup(key) or {}).get("choice") or {})
        merged.update(choice)
        record(key, measurements=[measurement], choice=merged)
    except Exception:
        pass
