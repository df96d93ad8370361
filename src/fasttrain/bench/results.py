"""Every bench writes its result as JSON in a run directory, so two machines or two versions can be compared.

runs/bench-<kind>-<UTC timestamp>/result.json (or --out DIR/result.json). The file holds the kind, when,
the fasttrain/torch versions, a short description of the machine, the settings the bench used and its
measurements; the same dict `--json` prints. No torch import here.
"""
from __future__ import annotations

import json
import os
import platform
import socket
import time
from pathlib import Path
from typing import Any

from fasttrain import __version__

RESULT_FILE = "result.json"
SCHEMA_VERSION = 1


def new_bench_dir(kind: str, base: Path = Path("runs"), now: float | None = None) -> Path:
    """runs/bench-<kind>-<YYYYmmdd-HHMMSS>, with -2, -3... when two benches start in the same second."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now if now is not None else time.time()))
    candidate = base / f"bench-{kind}-{stamp}"
    n = 2
    while candidate.exists():
        candidate = base / f"bench-{kind}-{stamp}-{n}"
        n += 1
    return candidate


def machine_summary(report: Any = None) -> dict[str, Any]:
    """Enough to tell two machines apart in a comparison: host, CPU, cores, RAM, GPU names, torch."""
    out: dict[str, Any] = {"hostname": socket.gethostname(), "platform": platform.platform(),
                           "python": platform.python_version(), "fasttrain": __version__}
    if report is not None:
        out.update(cpu=report.cpu.model, cores=report.cores, ram_total_bytes=report.memory.ram_total_bytes,
                   gpus=[g.name for g in report.gpus], torch=report.torch.version,
                   cuda=report.torch.cuda_version)
    return out


def envelope(kind: str, result: dict[str, Any], report: Any = None) -> dict[str, Any]:
    """The result with the fields every bench shares (stable keys)."""
    return {"schema": SCHEMA_VERSION, "kind": kind,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": machine_summary(report), **result}


def write_result(run_dir: Path, data: dict[str, Any]) -> Path:
    """Atomic write (temp file + rename) of result.json; returns its path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RESULT_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)
    return path


def read_result(path: Path) -> dict[str, Any]:
    """A result.json, or the one inside a bench run directory."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULT_FILE
    return json.loads(path.read_text())


def _rows(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Comparable rows of one result, by a key that means the same on any machine."""
    kind = data.get("kind")
    if kind == "speedups":
        return {r["setting"]: {"images_per_s": r.get("images_per_s"), "speedup": r.get("speedup"),
                               "status": r["status"]} for r in data.get("rows", [])}
    if kind == "loader":
        return {f"{p['workers']} workers" + (f", prefetch {p['prefetch']}" if p["prefetch"] else ""):
                {"images_per_s": p["images_per_s"], "ram_bytes": p["ram_bytes"]} for p in data.get("points", [])}
    if kind == "batch":
        s = data.get("search", {})
        return {"batch": {"batch": data.get("batch"), "largest_ok": s.get("largest_ok"),
                          "smallest_failed": s.get("smallest_failed"), "accumulation": data.get("accumulation")}}
    raise ValueError(f"unknown bench kind {kind!r}")


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two results of the same kind side by side: per row A, B and B/A of images/s (None where either is
    missing or skipped). Pure."""
    if a.get("kind") != b.get("kind"):
        raise ValueError(f"cannot compare a {a.get('kind')} result with a {b.get('kind')} result")
    ra, rb = _rows(a), _rows(b)
    rows = []
    for key in list(ra) + [k for k in rb if k not in ra]:
        x, y = ra.get(key, {}), rb.get(key, {})
        va, vb = x.get("images_per_s"), y.get("images_per_s")
        rows.append({"key": key, "a": x or None, "b": y or None,
                     "ratio": (vb / va) if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va
                     else None})
    label = lambda d: {"created_at": d.get("created_at"), **{k: d.get("machine", {}).get(k) for k in  # noqa: E731
                       ("hostname", "cpu", "cores", "gpus", "torch", "fasttrain")}}
    return {"kind": a.get("kind"), "a": label(a), "b": label(b), "rows": rows}
