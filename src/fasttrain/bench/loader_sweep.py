"""The settings `bench loader` sweeps (worker counts x prefetch factors) and what one setting measured over the
rounds (medians of the rate, the maximum of RAM). Pure."""
from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from typing import Any

from fasttrain.core.format import plural

PREFETCH_FACTORS = (2, 4)


@dataclass
class Setting:
    workers: int
    prefetch: int | None      # None with 0 workers: the main process loads one batch at a time

    @property
    def label(self) -> str:
        return plural(self.workers, "worker") + (f", prefetch {self.prefetch}" if self.prefetch else "")


@dataclass
class Point:
    """One setting's measurements (medians over rounds for the rate, the maximum for RAM)."""

    workers: int
    prefetch: int | None
    images_per_s: float
    ram_bytes: int            # PSS sum, main + workers, above the main process before the loader started
    rss_bytes: int            # RSS sum, main + workers (over-counts shared pages; shown for comparison)
    startup_s: float          # until the first batch arrived (worker start-up)
    rounds: int = 1
    images_per_s_low: float | None = None    # slowest and fastest round: the noise the median hides
    images_per_s_high: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def worker_counts(cores: int, max_workers: int | None = None) -> list[int]:
    """0, 1, 2, 3, 4, then steps of ~1.5x up to the cores, the cores, and one step past them (where more workers
    should stop helping). 2 cores -> [0, 1, 2, 3]; 16 -> [0, 1, 2, 3, 4, 6, 9, 13, 16, 24]."""
    top = max_workers if max_workers is not None else cores + max(1, cores // 2)
    counts = set(range(min(top, 4) + 1))
    w = 4
    while w < min(top, cores):
        w = max(w + 1, round(w * 1.5))
        counts.add(min(w, cores))
    if cores <= top:
        counts.add(cores)
    counts.add(top)
    return sorted(c for c in counts if c <= top)


def sweep_settings(counts: list[int], prefetch_factors: tuple[int, ...] = PREFETCH_FACTORS) -> list[Setting]:
    out: list[Setting] = []
    for w in counts:
        if w == 0:
            out.append(Setting(0, None))
        else:
            out.extend(Setting(w, p) for p in prefetch_factors)
    return out


def combine_rounds(samples: list[dict[str, Any]]) -> list[Point]:
    """samples: one dict per (round, setting) with workers, prefetch, images_per_s, ram_bytes, rss_bytes,
    startup_s -> one Point per setting: median rate and start-up, maximum RAM."""
    groups: dict[tuple[int, int | None], list[dict[str, Any]]] = {}
    for s in samples:
        groups.setdefault((s["workers"], s["prefetch"]), []).append(s)
    points = []
    for (w, p), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        rates = [r["images_per_s"] for r in rows]
        points.append(Point(w, p, statistics.median(rates), max(r["ram_bytes"] for r in rows),
                            max(r["rss_bytes"] for r in rows), statistics.median(r["startup_s"] for r in rows),
                            len(rows), min(rates), max(rates)))
    return points
