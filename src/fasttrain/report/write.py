"""The report drawn and written: one run's page (RUN/report.html by default), several runs' page, each plot as a PNG
file (--png). Checks come first, all at once (the runs, --out, matplotlib), so bad input is one UserError."""
from __future__ import annotations

import os
from pathlib import Path

from fasttrain.core.errors import Problem, UserError
from fasttrain.report import page
from fasttrain.report.gather import REPORT_FILE, RunRecord

PLOTTING_MISSING = "pip install 'fasttrain[report]'"   # the extra that brings matplotlib
COMPARE_FILE = "compare.html"                        # several runs' page, in the current folder by default


def plotting_problem() -> Problem | None:
    try:
        import matplotlib  # noqa: F401  # imported only to learn whether it is installed
    except ImportError:
        return Problem("report", "drawing the plots needs matplotlib, which is not installed",
                       f"install it: {PLOTTING_MISSING}")
    return None


def out_problem(out: Path, flag: str = "--out") -> Problem | None:
    """Why `out` cannot be written, or None (its folder is made when missing)."""
    if out.is_dir():
        return Problem(flag, "is a folder", "give a file name, e.g. report.html", str(out))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return Problem(flag, f"its folder cannot be made ({exc.strerror or type(exc).__name__})",
                       "give a path in a folder you can write", str(out))
    if not os.access(out.parent, os.W_OK):
        return Problem(flag, "its folder is not writable", "give a path in a folder you can write", str(out))
    return None


def check(out: Path | None = None, png_dir: Path | None = None) -> None:
    problems = [p for p in (plotting_problem(), out_problem(out) if out is not None else None,
                            out_problem(png_dir / "x.png", "--png") if png_dir is not None else None) if p]
    if problems:
        raise UserError(problems)


def run_images(run: RunRecord) -> page.Images:
    """Every figure of one run, drawn."""
    from fasttrain.report.figure import png_bytes
    from fasttrain.report.plots import FIGURES
    return {stem: (heading, png_bytes(draw(run))) for stem, heading, draw in FIGURES}


def overlay_images(runs: list[RunRecord]) -> page.Images:
    from fasttrain.report.figure import png_bytes
    from fasttrain.report.overlay import OVERLAY_HEADINGS, overlay_figures
    return {stem: (OVERLAY_HEADINGS[stem], png_bytes(figure)) for stem, figure in overlay_figures(runs).items()}


def _write(out: Path, text: str, images: page.Images, png_dir: Path | None, prefix: str) -> Path:
    from fasttrain.core.files import write_text_atomic
    write_text_atomic(out, text)
    if png_dir is not None:
        png_dir.mkdir(parents=True, exist_ok=True)
        for stem, (_, png) in images.items():
            (png_dir / f"{prefix}-{stem}.png").write_bytes(png)
    return out


def write_report(run: RunRecord, out: Path | None = None, png_dir: Path | None = None) -> Path:
    """One run's page, to `out` (default: the run folder's report.html); -> the file written."""
    images = run_images(run)
    return _write(out or run.path / REPORT_FILE, page.run_page(run, images), images, png_dir, run.name)


def write_comparison(runs: list[RunRecord], out: Path | None = None, png_dir: Path | None = None) -> Path:
    """Several runs' page, to `out` (default: compare.html in the current folder); -> the file written."""
    images = overlay_images(runs)
    return _write(out or Path(COMPARE_FILE), page.compare_page(runs, images), images, png_dir, "compare")
