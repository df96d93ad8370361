"""The speed-ups the field notes claim (data/speedup_claims.csv), and the words a table cites them in."""
from __future__ import annotations

import csv
from importlib import resources
from pathlib import Path


def load_claims(path: Path | None = None) -> list[dict[str, str]]:
    """Rows of data/speedup_claims.csv: setting, claimed_speedup, low, high, source, quote."""
    if path is None:
        path = Path(str(resources.files("fasttrain") / "data" / "speedup_claims.csv"))
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def claims_text(setting: str, claims: list[dict[str, str]]) -> tuple[float | None, str]:
    """(the first note's figure, "1.2x optimal-single-gpu-a10g.md; 1.1-1.3x aggressive-...") for a setting."""
    rows = [r for r in claims if r["setting"] == setting and r["claimed_speedup"]]
    if not rows:
        return None, "no figure in the notes"
    parts = []
    for r in rows:
        low, high = float(r["low"]), float(r["high"])
        figure = f"{low:g}x" if low == high else f"{low:g}-{high:g}x"
        parts.append(f"{figure} {r['source'].removesuffix('.md')}")
    return float(rows[0]["claimed_speedup"]), "; ".join(parts)


def claims_short(setting: str, claims: list[dict[str, str]]) -> str:
    """"2-3x (4 notes)" or "1.5x (aggressive-a10g-imagenet)": the range over every note, for narrow tables."""
    rows = [r for r in claims if r["setting"] == setting and r["claimed_speedup"]]
    if not rows:
        return "none"
    low, high = min(float(r["low"]) for r in rows), max(float(r["high"]) for r in rows)
    figure = f"{low:g}x" if low == high else f"{low:g}-{high:g}x"
    return f"{figure} ({rows[0]['source'].removesuffix('.md')})" if len(rows) == 1 else f"{figure} ({len(rows)} notes)"
