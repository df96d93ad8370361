"""The report as HTML: one self-contained page (CSS inline, each plot a PNG data URI; no script, font or image is
fetched, and no web address appears in it, so nothing can be requested), or the same as a fragment a notebook shows
(its CSS scoped to the report's own box, so the notebook's styles and the report's leave each other alone)."""
from __future__ import annotations

import base64
import html

from fasttrain.report import tables
from fasttrain.report.gather import RunRecord

# stem -> (heading, PNG bytes), in the page's order
Images = dict[str, tuple[str, bytes]]

CSS = """
.ftr{font:14px/1.45 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#1b1f24;max-width:1060px;margin:0 auto;
padding:8px 16px}
.ftr h1{font-size:22px;margin:12px 0 4px}.ftr h2{font-size:17px;margin:26px 0 6px;border-bottom:1px solid #d0d7de;
padding-bottom:3px}.ftr .status{color:#444;margin:0 0 8px}.ftr .missing{color:#9a6700}
.ftr img{max-width:100%;height:auto;border:1px solid #eaeef2;display:block}
.ftr table{border-collapse:collapse;margin:6px 0}.ftr td,.ftr th{border:1px solid #d0d7de;padding:3px 8px;
text-align:left;vertical-align:top}.ftr th{background:#f6f8fa}.ftr td.k{white-space:nowrap;color:#444}
.ftr pre{background:#f6f8fa;padding:8px;overflow:auto;font-size:12px}.ftr li{margin:2px 0}
"""

# What each section says under its plot, beside the plot's own axes.
CAPTIONS = {
    "accuracy-time": "Validation accuracy and the losses at the end of each epoch, against the run's clock (from the "
                     "command's start; a resumed run counts on from the time trained before its stop). Diamonds: the "
                     "first time each accuracy milestone was reached (time to accuracy).",
    "accuracy-epoch": "The same against epochs.",
    "learning-rate": "The learning rate at each logged optimizer step (and the effective batch where it changed); a "
                     "time budget's end is the dashed line, where the schedule reaches its floor.",
    "speed": "Training images/s (telemetry's rolling window) and each logged batch's time: waiting for data, the copy "
             "to the device, compute. Dashed: the forecast's images/s, made before the run.",
    "classes": "The best epoch's confusion matrix (rows: the true class; each row as shares of its images) and each "
               "class's validation accuracy.",
}


def esc(text: object) -> str:
    """Text as HTML; `://` written with an entity, so no web address stands in the file (it still reads the same)."""
    return html.escape(str(text)).replace("://", "&#58;//")


def _table(rows: list[tuple[str, str]]) -> str:
    body = "".join(f"<tr><td class=k>{esc(k)}</td><td>{esc(v)}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>" if rows else "<p>nothing recorded</p>"


def _grid(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def img(stem: str, heading: str, png: bytes) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{esc(heading)}" id="plot-{esc(stem)}" src="data:image/png;base64,{data}">'


def _plot_sections(images: Images, extra: dict[str, str]) -> list[str]:
    out = []
    for stem, (heading, png) in images.items():
        caption = f"<p>{esc(CAPTIONS[stem])}</p>" if stem in CAPTIONS else ""
        out.append(f"<h2>{esc(heading)}</h2>{img(stem, heading, png)}{caption}{extra.get(stem, '')}")
    return out


def run_fragment(run: RunRecord, images: Images) -> str:
    """One run's report as an HTML fragment (a notebook's output)."""
    from fasttrain.report.series import step_series
    missing = f"<p class=missing>missing: {esc('; '.join(run.missing))}</p>" if run.missing else ""
    memory = step_series(run).memory_what
    extra = {"speed": _table(tables.speed_rows(run)),
             "memory": f"<p>Plotted: {esc(memory)}, at each logged step, against the limit it is held to.</p>"}
    notes = "".join(f"<li>{esc(n)}</li>" for n in tables.plan_notes(run))
    profile = (f"<details><summary>profile.yaml (every setting as resolved for this run)</summary>"
               f"<pre>{esc(run.profile_text)}</pre></details>") if run.profile_text else ""
    parts = [f"<h1>fasttrain report: {esc(run.name)}</h1><p class=status>{esc(tables.status_line(run))}</p>{missing}",
             *_plot_sections(images, extra),
             f"<h2>Plan</h2>{_table(tables.plan_rows(run))}<ul>{notes}</ul>{profile}",
             f"<h2>Summary</h2>{_table(tables.summary_rows(run))}"]
    return f'<div class="ftr"><style>{CSS}</style>{"".join(parts)}</div>'


def compare_fragment(runs: list[RunRecord], images: Images) -> str:
    """Several runs on one page: their curves overlaid, then one row each."""
    header, rows = tables.compare_rows(runs)
    names = ", ".join(run.label for run in runs)
    parts = [f"<h1>fasttrain report: {len(runs)} runs</h1><p class=status>{esc(names)}</p>",
             *_plot_sections(images, {}), f"<h2>Runs</h2>{_grid(header, rows)}"]
    return f'<div class="ftr"><style>{CSS}</style>{"".join(parts)}</div>'


def document(title: str, fragment: str) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{esc(title)}</title></head><body>{fragment}</body></html>\n")


def run_page(run: RunRecord, images: Images) -> str:
    return document(f"fasttrain report: {run.name}", run_fragment(run, images))


def compare_page(runs: list[RunRecord], images: Images) -> str:
    return document(f"fasttrain report: {', '.join(r.name for r in runs)}", compare_fragment(runs, images))
