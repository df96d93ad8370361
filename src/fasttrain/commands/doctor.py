"""`fasttrain doctor`: flags parsed into a DoctorRequest, the check run by doctor/job.py (the same call
fasttrain.doctor() makes), its DoctorResult rendered (doctor/view.py, or --json).

Exit 0 when nothing fails, 1 when a finding fails (so it can gate a script), 2 for bad input.
Imports nothing heavy at module level: cli.py imports this file for `fasttrain --help`.
"""
from __future__ import annotations

from pathlib import Path

import typer

from fasttrain.commands import options


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor_cmd)


def doctor_cmd(
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
) -> None:
    """Inspect this machine (GPU, PyTorch build, CPU, RAM, /dev/shm, disk), say what is wrong, recommend settings."""
    from fasttrain.doctor.job import DoctorRequest, run_doctor
    result = run_doctor(DoctorRequest(profile=profile, data=data, target=target, write_profile=write_profile,
                                      force=force, report_from=report_from))
    if as_json:
        from fasttrain.core.console import print_json
        print_json(result.to_dict())
    elif show_all:
        from fasttrain.doctor import view as doctor_view
        doctor_view.render(result.report, result.findings, result.recommendation, result.profile,
                           result.written)
    else:
        from fasttrain.doctor import view as doctor_view
        doctor_view.render_brief(result)
    if result.status == "fail":
        raise typer.Exit(1)
