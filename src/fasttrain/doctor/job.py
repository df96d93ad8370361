"""One doctor check from its request to its result: the machine (probed, or a recorded report), the profile, the
rules, the recommendation and --write-profile's file -> a DoctorResult. `fasttrain doctor` (commands/doctor.py)
renders it and exits 1 when a finding failed; fasttrain.doctor() (api/calls.py) returns it. Bad input: UserError."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fasttrain.core.errors import Problem, UserError

if TYPE_CHECKING:
    from fasttrain.doctor.result import DoctorResult
    from fasttrain.hardware.report import HardwareReport
    from fasttrain.profiles.schema import Profile
    from fasttrain.tuning.store import Measurement


@dataclass(frozen=True)
class DoctorRequest:
    """What doctor is asked, by `fasttrain doctor`'s parameter names: --profile, --data, --target-images-per-s,
    --write-profile (with --force) and --report-from. How it is shown (--json, --all) is the command's."""

    profile: str | None = None
    data: Path | None = None
    target: float | None = None
    write_profile: Path | None = None
    force: bool = False
    report_from: Path | None = None


def run_doctor(req: DoctorRequest) -> DoctorResult:
    """gather (probe or the recorded report, the profile, the data disk) -> compute (rules, recommendation)."""
    from fasttrain.doctor import checks as doctor
    from fasttrain.doctor.result import DoctorResult
    from fasttrain.hardware import machine as hardware
    from fasttrain.profiles.recommend import recommend

    data, write_profile = req.data, req.write_profile
    if req.report_from is not None and data is not None:
        raise UserError([Problem("--data", "measures this machine; it cannot be combined with --report-from",
                                 "drop one of them")])
    if data is not None and not data.is_dir():
        raise UserError([Problem("--data", "not a directory", "give the data set's root folder", str(data))])
    if write_profile is not None and write_profile.exists() and not req.force:
        raise UserError([Problem("--write-profile", f"{write_profile} already exists", "add --force to replace it",
                                 str(write_profile))])
    report = load_report(req.report_from) if req.report_from else hardware.probe(data_dir=data)
    prof, label = _profile(req.profile, report)
    facts = None
    if data is not None:
        from fasttrain.doctor.checks import data_facts
        facts = data_facts(data, prof, report)
    findings = doctor.run_rules(report, prof, req.target, profile_label=label, data=facts)
    rec = recommend(report, _measured(report))
    written = None
    if write_profile is not None:
        from fasttrain.profiles.writer import write_profile as write
        written = write(rec, report, write_profile, force=req.force)
    return DoctorResult(report, findings, rec, label, written)


def load_report(path: Path) -> HardwareReport:
    """A recorded HardwareReport: a bare report, or the whole `doctor --json` output (its "report" key)."""
    from pydantic import ValidationError

    from fasttrain.hardware.report import HardwareReport
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError([Problem("--report-from", "no such file", "record one with `fasttrain doctor --json > FILE`",
                                 str(path))]) from None
    except (OSError, ValueError) as exc:
        raise UserError([Problem("--report-from", f"not a JSON file: {exc}", "give a file written by "
                                 "`fasttrain doctor --json`", str(path))]) from None
    if isinstance(data, dict) and isinstance(data.get("report"), dict):
        data = data["report"]
    try:
        return HardwareReport.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "report"
        raise UserError([Problem(f"--report-from {path}: {where}", first["msg"].lower(),
                                 "give a file written by `fasttrain doctor --json`")]) from None


def _measured(report: HardwareReport) -> list[Measurement]:
    """Everything measured on the machine the report describes, with its torch (tuning trials, bench)."""
    from fasttrain.tuning.store import load_cache, machine_id, machine_measurements
    try:
        entries = load_cache()
    except UserError:  # an unusable FASTTRAIN_CACHE: nothing measured to read
        return []
    return machine_measurements(entries, machine_id(report), report.torch.version)


def _profile(ref: str | None, report: HardwareReport) -> tuple[Profile, str]:
    from fasttrain.profiles import presets
    from fasttrain.profiles.preset_match import best_preset
    if ref:
        return presets.resolve(ref).profile, ref
    name = best_preset(report)
    return presets.resolve(name).profile, f"{name} (best match; `train` uses it when --profile is omitted)"
