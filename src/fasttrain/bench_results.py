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
