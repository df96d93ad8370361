"""What `fasttrain bench loader` measured the input paths to buy on a data set, read back for the input-bound
verdict and `doctor --data`, so they can name the factor instead of a guess.

`bench loader` writes runs/bench-loader-<UTC time>/result.json with `data` and `paths` (per path, the median ratio
of images/s per core to torchvision's ImageFolder + PIL). The newest such result whose data is this folder (or
the prepared set's source folder, or a set prepared from it) is the one quoted. gather: `find_path_gains`; text:
`gain_sentence` (pure).
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

BENCH_GLOB = "bench-loader-*"
MAX_RESULTS = 200          # newest bench-loader directories looked at
MAX_RESULT_BYTES = 4 * 2**20


def _key(path: str | Path | None) -> str | None:
    if not path:
        return None
    try:
        return str(Path(path).expanduser().resolve())
    except (OSError, RuntimeError):
        return None


def _same_data(data: Path) -> set[str]:
    """data itself, and for a prepared set its recorded source folder."""
    from fasttrain.datasets.shards import MANIFEST

    keys = {_key(data)}
    with contextlib.suppress(OSError, ValueError, AttributeError):
        keys.add(_key(json.loads((data / MANIFEST).read_text(encoding="utf-8")).get("source")))
    return {k for k in keys if k}


def find_path_gains(data: str | Path, runs: Path = Path("runs")) -> dict[str, Any] | None:
    """The newest bench-loader result for this data with a path comparison -> {"shards": ratio, "fast-decode": ratio,
    "date": "YYYY-MM-DD", "result": path}; None when none is saved under `runs`."""
    wanted = _same_data(Path(data))
    try:
        dirs = sorted(runs.glob(BENCH_GLOB), reverse=True)[:MAX_RESULTS]  # timestamped names: newest first
    except OSError:
        return None
    for d in dirs:
        path = d / "result.json"
        try:
            if path.stat().st_size > MAX_RESULT_BYTES:
                continue
            result = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(result, dict) or not result.get("paths"):
            continue
        if not wanted & _same_data(Path(str(result.get("data") or ""))):
            continue
        gains = {p["name"]: p["per_core_vs_torchvision"] for p in result["paths"] if isinstance(p, dict)
                 and p.get("status") == "measured" and p.get("per_core_vs_torchvision")}
        if "shards" in gains or "fast-decode" in gains:
            return {**gains, "date": str(result.get("created_at", ""))[:10], "result": str(path)}
    return None


def gain_sentence(gains: dict[str, Any] | None, data: str | Path | None) -> str:
    """'prepared shards fed 3.1x more images/s per core than torchvision's ImageFolder here (bench loader,
    2026-11-24)', or that it is unmeasured and the command that measures it (pure)."""
    if gains and ("shards" in gains or "fast-decode" in gains):
        parts = []
        if "shards" in gains:
            parts.append(f"prepared shards fed {gains['shards']:.1f}x")
        if "fast-decode" in gains:
            parts.append(f"the fast folder path {gains['fast-decode']:.1f}x")
        when = f", {gains['date']}" if gains.get("date") else ""
        return (f"{' and '.join(parts)} the images/s per core of torchvision's ImageFolder + PIL on these files "
                f"(bench loader{when})")
    where = data if data else "DIR"
    return (f"the factor shards buy on these files is unmeasured: `fasttrain bench loader --data {where}` "
            "measures it")
