"""The report every run writes at its end (and on a stop), on the process that writes the run folder: a missing
matplotlib is said once with the command that installs it, a report that cannot be drawn is warned about once, and
neither changes how the run ends."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

# Set (to anything but "" or "0"): no report.html at the end of a run (`fasttrain report RUN` draws it later).
NO_REPORT_ENV = "FASTTRAIN_NO_REPORT"


def report_after_run(run_dir: Path, stream: TextIO | None = None) -> Path | None:
    """Write run_dir/report.html; -> its path, or None when it could not be (said on `stream`, default stderr) or
    was not asked for (FASTTRAIN_NO_REPORT)."""
    if os.environ.get(NO_REPORT_ENV, "") not in ("", "0"):
        return None
    from fasttrain.report.write import PLOTTING_MISSING, plotting_problem, write_report
    out = stream or sys.stderr
    if plotting_problem() is not None:
        print(f"fasttrain: note: no report.html (plots of the run): it needs matplotlib; install it with "
              f"{PLOTTING_MISSING}, then `fasttrain report {run_dir}` draws this run's", file=out, flush=True)
        return None
    try:
        from fasttrain.report.gather import gather_run
        path = write_report(gather_run(run_dir))
    except Exception as exc:
        print(f"fasttrain: warning: report.html could not be written: {type(exc).__name__}: {str(exc)[:200]}; "
              f"the run is unaffected", file=out, flush=True)
        return None
    print(f"fasttrain: report: {path} (the run's plots; opens offline in a browser)", file=out, flush=True)
    return path
