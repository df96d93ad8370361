"""`bench loader`'s input paths over the rounds: one row per path (medians, per core against the torchvision
baseline of the same round) and the sentence recommending one. Pure."""
from __future__ import annotations

import statistics
from typing import Any

BASELINE = "torchvision"
LABELS = {"torchvision": "torchvision ImageFolder + PIL (baseline)", "fast-decode": "fast decode (libjpeg-turbo, "
          "reduced size, uint8 augment)", "shards": "prepared shards (fasttrain data prepare)",
          "gpu-decode": "GPU decode (nvJPEG, batched)"}


def combine(samples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rounds -> one row per path: medians of images/s and images/s per core, and the median of the per-round
    ratios of images/s per core to the baseline measured in the same round (pure)."""
    names = list(dict.fromkeys(s["name"] for s in samples))
    base = {s["round"]: s for s in samples if s["name"] == BASELINE}
    rows = []
    for name in names:
        mine = [s for s in samples if s["name"] == name]
        ratios = [s["images_per_s_per_core"] / base[s["round"]]["images_per_s_per_core"] for s in mine
                  if s["round"] in base and base[s["round"]]["images_per_s_per_core"] > 0]
        rows.append({"name": name, "label": LABELS.get(name, name), "status": "measured",
                     "images_per_s": statistics.median(s["images_per_s"] for s in mine),
                     "images_per_s_per_core": statistics.median(s["images_per_s_per_core"] for s in mine),
                     "per_core_vs_torchvision": statistics.median(ratios) if ratios else None,
                     "ram_bytes": max(s["ram_bytes"] for s in mine), "workers": mine[0]["workers"],
                     "rounds": len(mine), "images": sum(s["images"] for s in mine)})
    return rows


def recommend_path(rows: list[dict[str, Any]], train_rate: float | None) -> str:
    """One sentence: which path to use, by the measured rates (pure)."""
    measured = [r for r in rows if r["status"] == "measured"]
    if not measured:
        return "no input path could be measured"
    best = max(measured, key=lambda r: r["images_per_s"])
    base = next((r for r in measured if r["name"] == BASELINE), None)
    gain = f" ({best['per_core_vs_torchvision']:.1f}x the baseline per core)" if base and best.get(
        "per_core_vs_torchvision") else ""
    how = {"shards": "run `fasttrain data prepare SRC --out DST` once and train with --data DST",
           "fast-decode": "train --data on the folder uses it already",
           "gpu-decode": "decode on the GPU: the CPU paths cannot keep up",
           BASELINE: "the faster paths bring nothing measurable on these files"}[best["name"]]
    text = f"fastest: {best['name']} at {best['images_per_s']:.0f} img/s{gain}; {how}"
    if train_rate:
        text += (f"; the model trains at {train_rate:.0f} img/s, so it " +
                 ("keeps up" if best["images_per_s"] >= train_rate else "still does not keep up: more cores "
                  "or a smaller image size"))
    return text
