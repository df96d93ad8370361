"""`fasttrain.report(run, ...)`: a run's report (several runs: their curves on one page) as an object a notebook
shows inline, the same page `fasttrain report` writes; and the plots a run's result (`RunSummary`) shows under its
table in a notebook."""
from __future__ import annotations

from pathlib import Path

from fasttrain.report.gather import RunRecord


class RunReport:
    """The report of one run or the comparison of several: `html` (a fragment a notebook shows), `path` (the file
    written, when `out` was given), `runs` (what each folder holds)."""

    def __init__(self, runs: list[RunRecord], html: str, path: Path | None):
        self.runs, self.html, self.path = runs, html, path

    def _repr_html_(self) -> str:  # IPython's display protocol
        return self.html

    def __repr__(self) -> str:
        where = f", written to {str(self.path)!r}" if self.path is not None else ""
        return f"RunReport({', '.join(r.name for r in self.runs)}{where})"


def report(*runs: str | Path, out: str | Path | None = None) -> RunReport:
    """The report of `runs` (run folders, e.g. "runs/NAME"): one run's plots, plan and summary, or several runs'
    curves overlaid; shown inline in a notebook. `out`: also write the page there (an HTML file that opens offline).
    Raises UserError for a folder that is not a run, or without matplotlib (`pip install 'fasttrain[report]'`)."""
    from fasttrain.report import page, write
    from fasttrain.report.gather import gather_runs
    target = Path(out) if out is not None else None
    write.check(target)
    records = gather_runs([Path(r) for r in runs])
    if len(records) == 1:
        images = write.run_images(records[0])
        fragment, html = page.run_fragment(records[0], images), (lambda: page.run_page(records[0], images))
    else:
        images = write.overlay_images(records)
        fragment, html = page.compare_fragment(records, images), (lambda: page.compare_page(records, images))
    if target is not None:
        from fasttrain.core.files import write_text_atomic
        write_text_atomic(target, html())
    return RunReport(records, fragment, target)


def run_plots_html(run_dir: Path) -> str:
    """One run's report as a notebook fragment, or "" when it cannot be drawn (no matplotlib, no folder)."""
    from fasttrain.report import page, write
    from fasttrain.report.gather import gather_run, is_run_folder
    if write.plotting_problem() is not None or not is_run_folder(run_dir):
        return ""
    try:
        record = gather_run(run_dir)
        return page.run_fragment(record, write.run_images(record))
    except Exception:
        return ""
