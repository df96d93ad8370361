"""`fasttrain report RUN [RUN...]`: a run's report.html (re)written, or several runs' curves on one page; --png writes
each plot as a PNG file too. gather: report/gather.py; compute and draw: report/series.py, plots.py, overlay.py; the
page: report/page.py, written by report/write.py. matplotlib is imported inside the command only (cli.py imports this
file for --help)."""
from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)


def report_cmd(
    runs: list[Path] = typer.Argument(..., metavar="RUN...", help="Run folders (runs/NAME): one rewrites its "
                                      "report.html; several are compared on one page."),
    out: Path | None = typer.Option(None, "--out", "-o", metavar="FILE", help="Write the page here (default: "
                                       "RUN/report.html for one run, compare.html here for several)."),
    png: Path | None = typer.Option(None, "--png", metavar="DIR", help="Also write each plot as a PNG file "
                                       "in DIR (for a README or a pull request)."),
) -> None:
    """The plots of a run (accuracy and loss against time and epochs, LR, speed and where each step's time went,
    memory, the classes it confuses) with its plan and summary, as one HTML file that opens offline; with several
    runs, their curves overlaid on one page."""
    import sys

    from fasttrain.core.errors import UserError
    from fasttrain.report.gather import gather_runs, run_problem
    from fasttrain.report.write import check, write_comparison, write_report

    problems = [p for p in (run_problem(Path(r)) for r in runs) if p is not None]
    try:
        check(out, png)
    except UserError as exc:
        problems += exc.problems
    if problems:
        raise UserError(problems)
    records = gather_runs(list(runs))
    path = write_report(records[0], out, png) if len(records) == 1 else write_comparison(records, out, png)
    pngs = f"; each plot as a PNG in {png}" if png is not None else ""
    print(f"fasttrain: report: {path}{pngs}", file=sys.stderr)
