"""A notebook platform's session limit (Kaggle, Colab): a run longer than the session is cut off with its LR
still high and its last epochs lost; `train --time-budget` ends the schedule and the last checkpoint inside it.
The limits live in data/notebook_sessions.csv with their sources; the platform is known from its environment."""
from __future__ import annotations

import csv
import functools
from importlib import resources

from fasttrain.doctor.findings import Context, Finding

MARGIN_H = 0.5   # hours kept free for the notebook's own cells (loading data, saving outputs) around the run


@functools.lru_cache(maxsize=1)
def sessions() -> tuple[dict[str, str], ...]:
    with (resources.files("fasttrain") / "data" / "notebook_sessions.csv").open(encoding="utf-8") as fh:
        return tuple(csv.DictReader(fh))


def rule_session_limit(c: Context) -> Finding | None:
    """On a notebook platform (its environment says so): its session limit and the flag that respects it."""
    row = next((r for r in sessions() if r["env"] in c.report.env), None)
    if row is None:
        return None
    hours = float(row["session_hours"])
    quota = f"; GPU time also draws on a weekly quota of about {row['weekly_gpu_hours']} h" \
        if row["weekly_gpu_hours"] else ""
    budget = hours - MARGIN_H
    flag = f"{int(budget)}h{round((budget % 1) * 60):02d}m" if budget % 1 else f"{int(budget)}h"
    return Finding("session", "warn", f"{row['platform']} session: about {hours:g} h",
                   f"a {row['platform']} notebook session ends after about {hours:g} hours{quota}; a run still going "
                   "then is cut off mid-schedule", f"fasttrain train --time-budget {flag} (or --deadline HH:MM): the "
                   "schedule, the last validation and the last checkpoint finish inside the session")
