"""`bench speedups`' timed rounds summarised: medians and per-round ratios to the baseline, the verdict beside the
notes' claim, the table's rows, and what multiplying the single speed-ups predicts. Pure."""
from __future__ import annotations

import statistics
from typing import Any

from fasttrain.bench.claims import claims_short, claims_text
from fasttrain.bench.variants import ALL, BASELINE, LABELS, SETTINGS, Skipped, Variant

# A measured speed-up within this of 1.0 is "no change" in the verdict column: round-to-round noise here.
NOISE_BAND = 0.03


def summarize(rounds: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """rounds: [{config: images/s}] -> per config: median images/s, speed-up (median over rounds of the ratio
    to the same round's baseline) and the lowest and highest of those ratios."""
    out: dict[str, dict[str, float]] = {}
    names = {n for r in rounds for n in r}
    for name in names:
        values = [r[name] for r in rounds if name in r]
        ratios = [r[name] / r[BASELINE] for r in rounds if name in r and r.get(BASELINE)]
        out[name] = {"images_per_s": statistics.median(values),
                     "speedup": statistics.median(ratios) if ratios else float("nan"),
                     "speedup_low": min(ratios) if ratios else float("nan"),
                     "speedup_high": max(ratios) if ratios else float("nan"), "rounds": len(values)}
    return out


def verdict(measured: float, claimed: float | None, low: float | None = None, high: float | None = None) -> str:
    """Words for the verdict column. When some rounds were faster and some slower than the baseline the median
    alone would overstate what is known, so the row says the rounds disagree."""
    outside_noise = measured < 1 - NOISE_BAND or measured > 1 + NOISE_BAND
    if outside_noise and low is not None and high is not None and low < 1.0 < high:
        return f"unclear: rounds disagree ({low:.2f}-{high:.2f}x)"
    if measured < 1 - NOISE_BAND:
        return "slower here"
    if measured <= 1 + NOISE_BAND:
        return "no gain here"
    if claimed is None:
        return "faster"
    return "as claimed or better" if measured >= claimed - NOISE_BAND else f"{measured / claimed:.0%} of the claim"


def speedup_rows(summary: dict[str, dict[str, float]], variants: list[Variant], skipped: list[Skipped],
                 claims: list[dict[str, str]], all_variant: Variant | None = None) -> list[dict[str, Any]]:
    """The table: baseline, each setting (measured or skipped, with its reason), all together."""
    rows: list[dict[str, Any]] = []
    notes = {v.name: v.note for v in variants}
    if all_variant is not None:
        notes[ALL] = all_variant.note
    skip = {s.name: s.reason for s in skipped}
    order = [BASELINE] + [n for n, _ in SETTINGS] + [ALL]
    for name in order:
        claimed, claim_text = claims_text(name, claims) if name != BASELINE else (None, "")
        row: dict[str, Any] = {"setting": name, "label": LABELS[name], "claimed_speedup": claimed,
                               "claimed": claim_text, "claimed_short": claims_short(name, claims) if claim_text else "",
                               "note": notes.get(name, "")}
        if name in summary:
            s = summary[name]
            row.update(status="measured", images_per_s=s["images_per_s"], speedup=s["speedup"],
                       speedup_low=s["speedup_low"], speedup_high=s["speedup_high"],
                       verdict="reference" if name == BASELINE else verdict(s["speedup"], claimed,
                                                                            s["speedup_low"], s["speedup_high"]))
        elif name in skip:
            row.update(status="skipped", reason=skip[name])
        else:
            continue  # not asked for (--only)
        rows.append(row)
    return rows


def product_of_singles(rows: list[dict[str, Any]]) -> float | None:
    """What multiplying the single speed-ups predicts for all together (the notes' arithmetic). Only one
    precision counts, the one `all` uses: fp16 when it was measured, else bf16."""
    measured = {r["setting"]: r["speedup"] for r in rows if r.get("status") == "measured"}
    singles = [v for k, v in measured.items() if k not in (BASELINE, ALL) and not (k == "bf16" and "fp16" in measured)]
    if not singles:
        return None
    total = 1.0
    for s in singles:
        total *= s
    return total
