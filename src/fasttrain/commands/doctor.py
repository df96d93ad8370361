"""`fasttrain doctor`: gather (probe or a recorded report) -> compute (rules, recommendation) -> render.

Exit 0 when nothing fails, 1 when a finding fails (so it can gate a script), 2 for bad input.
Imports nothing heavy at module level: cli.py imports this file for `fasttrain --help`.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from fasttrain.commands import options
from fasttrain.core.errors import Problem, UserError

if TYPE_CHECKING:
    from fasttrain.hardware.report import HardwareReport
    from fasttrain.profiles.schema import Profile
    from fasttrain.tuning.store import Measurement


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_cmd)


def load_report(path: Path) -> HardwareReport:
    """A recorded HardwareReport: a bare report, or the whole `doctor --json` output (its "report" key)."""
    from pydantic import ValidationError

    from fasttrain.hardware.report import HardwareReport
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError([Problem("--report-from", "no such file", "record one with `fasttrain doctor --json > FILE`",
                                 str(path))])
    except (OSError, ValueError) as exc:
        raise UserError([Problem("--report-from", f"not a JSON file: {exc}", "give a file written by "
                                 "`fasttrain doctor --json`", str(path))])
    if isinstance(data, dict) and isinstance(data.get("report"), dict):
        data = data["report"]
    try:
        return HardwareReport.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "report"
        raise UserError([Problem(f"--report-from {path}: {where}", first["msg"].lower(),
                                 "give a file written by `fasttrain doctor --json`")])


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
    from fasttrain.profiles.recommend import best_preset
    if ref:
        return presets.resolve(ref).profile, ref
    name = best_preset(report)
    return presets.resolve(name).profile, f"{name} (best match; `train` uses it when --profile is omitted)"


def doctor_cmd(
    ctx: typer.Context,
    profile: str | None = options.profile_option(help="Check this profile against the machine (default: the "
                                                         "best-matching preset)."),
    data: Path | None = typer.Option(None, "--data", "-d", metavar="DIR",
                                        help="Also measure read speed of this data set (at most 200 files or 2 s)."),
    target: float | None = typer.Option(None, "--target-images-per-s", min=0.001, metavar="N",
                                           help="Images/s the data disk must feed (default: the GPU's published "
                                                "ResNet-50 rate where known)."),
    as_json: bool = options.json_option(help="Machine-readable: {report, findings, recommendation}."),
    write_profile: Path | None = typer.Option(None, "--write-profile", metavar="FILE",
                                                 help="Write a profile tuned to this machine (extends the matched "
                                                      "preset)."),
    force: bool = typer.Option(False, "--force", help="Let --write-profile replace an existing file."),
    show_all: bool = typer.Option(False, "--all", help="Show everything: the hardware, the software, every finding "
                                                       "and each recommended setting with its reason (default: the "
                                                       "verdict and what is not ok)."),
    report_from: Path | None = typer.Option(None, "--report-from", metavar="FILE.json",
                                               help="Judge a recorded report instead of this machine."),
) -> object:  # for the Python API: the DoctorResult; None on the command line
    """Inspect this machine (GPU, PyTorch build, CPU, RAM, /dev/shm, disk), say what is wrong, recommend settings."""
    from fasttrain.doctor import checks as doctor
    from fasttrain.hardware import machine as hardware
    from fasttrain.profiles.recommend import recommend

    if report_from is not None and data is not None:
        raise UserError([Problem("--data", "measures this machine; it cannot be combined with --report-from",
                                 "drop one of them")])
    if data is not None and not data.is_dir():
        raise UserError([Problem("--data", "not a directory", "give the data set's root folder", str(data))])
    if write_profile is not None and write_profile.exists() and not force:
        raise UserError([Problem("--write-profile", f"{write_profile} already exists", "add --force to replace it",
                                 str(write_profile))])
    report = load_report(report_from) if report_from else hardware.probe(data_dir=data)
    prof, label = _profile(profile, report)
    facts = None
    if data is not None:
        from fasttrain.doctor.checks import data_facts
        facts = data_facts(data, prof, report)
    findings = doctor.run_rules(report, prof, target, profile_label=label, data=facts)
    rec = recommend(report, _measured(report))
    written = None
    if write_profile is not None:
        from fasttrain.profiles.writer import write_profile as write
        written = write(rec, report, write_profile, force=force)
    from fasttrain.doctor.result import DoctorResult
    result = DoctorResult(report, findings, rec, label, written)
    if options.api_call(ctx) is not None:  # fasttrain.doctor() (api/): the result, printed by nobody
        return result
    if as_json:
        from fasttrain.core.console import print_json
        print_json(result.to_dict())
    elif show_all:
        from fasttrain.doctor import view as doctor_view
        doctor_view.render(report, findings, rec, label, written)
    else:
        from fasttrain.doctor import view as doctor_view
        doctor_view.render_brief(result)
    if result.status == "fail":
        raise typer.Exit(1)
