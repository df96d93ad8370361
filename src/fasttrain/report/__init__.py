"""The run's report: report.html, one self-contained page of plots and tables read from a run folder, written by every
run at its end (and on a stop), by `fasttrain report RUN [RUN...]` and shown in a notebook by `fasttrain.report()`.

gather.py reads the folder into a RunRecord (what is missing is said, never fatal); series.py and tables.py compute
what is drawn, purely; plots.py and overlay.py draw one run's figures and several runs' curves; page.py lays the page
out; write.py writes it (and --png's files); after_run.py is the run's hook (a failure warns once, never fails the run).

Plotting library: matplotlib, an optional extra (`pip install 'fasttrain[report]'`). Its static PNGs embed in the page
as base64 data URIs, so the file opens offline in any browser and in a notebook with no script and nothing fetched;
the Agg backend draws without a display (a server, a container, CI). plotly would add zoom and hover, but it needs its
JavaScript inlined (about 3.5 MB a page) to work offline, and a page that must run a script is blank where scripts
are blocked. matplotlib is imported inside the drawing functions only: `fasttrain --help` never loads it.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "RunRecord": "gather",
    "gather_run": "gather",
    "gather_runs": "gather",
    "write_report": "write",
    "write_comparison": "write",
    "PLOTTING_MISSING": "write",
    "report_after_run": "after_run",
})
