"""Every bench writes its result as JSON in a run directory, so two machines or two versions can be compared.

runs/bench-<kind>-<UTC timestamp>/result.json (or --out DIR/result.json). The file holds the kind, when,
the fasttrain/torch versions, a short description of the machine, the settings the bench used and its
measurements; the same dict `--json` prints. No torch import here.
"""
from __future__ import annotations

import json
import platform
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain import __version__
from fasttrain.core.files import write_text_atomic

if TYPE_CHECKING:
    from fasttrain.hardware.report import HardwareReport

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


def machine_summary(report: HardwareReport | None = None) -> dict[str, Any]:
    """Enough to tell two machines apart in a comparison: host, CPU, cores, RAM, GPU names, torch."""
    out: dict[str, Any] = {"hostname": socket.gethostname(), "platform": platform.platform(),
                           "python": platform.python_version(), "fasttrain": __version__}
    if report is not None:
        out.update(cpu=report.cpu.model, cores=report.cores, ram_total_bytes=report.memory.ram_total_bytes,
                   gpus=[g.name for g in report.gpus], torch=report.torch.version,
                   cuda=report.torch.cuda_version)
    return out


def envelope(kind: str, result: dict[str, Any], report: HardwareReport | None = None) -> dict[str, Any]:
    """The result with the fields every bench shares (stable keys)."""
    return {"schema": SCHEMA_VERSION, "kind": kind,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": machine_summary(report), **result}


def write_result(run_dir: Path, data: dict[str, Any]) -> Path:
    """Atomic write (temp file + rename) of result.json; returns its path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / RESULT_FILE
    return write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def save_result(kind: str, out: Path | None, result: dict[str, Any], report: HardwareReport) -> Path:
    """Write `result` (enveloped) to OUT/result.json or a new runs/bench-<kind>-<time>/, and add the envelope's
    fields and the file's path to `result`, so --json prints what the file holds -> the file."""
    run_dir = out if out is not None else new_bench_dir(kind)
    data = envelope(kind, result, report)
    path = write_result(run_dir, data)
    result.update({k: data[k] for k in ("schema", "kind", "created_at", "machine")})
    result["result_path"] = str(path)
    return path


# A result.json is a few kB; anything far larger is not one (and must not be read into memory whole).
MAX_RESULT_BYTES = 16 * 2**20
KINDS = ("speedups", "loader", "batch")
_TEXT_LIMIT = 300  # longest string shown from a result (hostname, cpu, setting names...)


class NotAResult(ValueError):
    """The file is not a bench result: the message says why, in one line."""


def read_result(path: Path) -> dict[str, Any]:
    """A result.json, or the one inside a bench run directory (plain JSON, no checks: see load_result)."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULT_FILE
    return json.loads(path.read_text())


def load_result(path: Path) -> dict[str, Any]:
    """read_result + check_result: a result `compare` can use, or NotAResult saying why in one line."""
    path = Path(path)
    try:
        if path.is_dir():
            if not (path / RESULT_FILE).is_file():
                raise NotAResult(f"directory without a {RESULT_FILE}")
            path = path / RESULT_FILE
        if not path.exists():
            raise NotAResult("no such file")
        if not path.is_file():
            raise NotAResult("not a regular file")
        size = path.stat().st_size
        if size > MAX_RESULT_BYTES:
            raise NotAResult(f"{size:,} bytes: too large for a bench result (at most {MAX_RESULT_BYTES:,})")
        with path.open("rb") as fh:
            raw = fh.read(MAX_RESULT_BYTES + 1)
    except NotAResult:
        raise
    except OSError as exc:
        raise NotAResult(f"cannot read it: {exc.strerror or type(exc).__name__}") from exc
    except ValueError as exc:  # a NUL byte in the path
        raise NotAResult(f"cannot look it up: {exc}") from exc
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise NotAResult("not text (binary data)") from exc
    except RecursionError as exc:
        raise NotAResult("not JSON: nested too deeply") from exc
    except ValueError as exc:
        raise NotAResult(f"not JSON: {str(exc).splitlines()[0][:_TEXT_LIMIT]}") from exc
    check_result(data)
    return data


def check_result(data: Any) -> None:
    """NotAResult unless `data` has the shape `compare` and the view read: a dict with a known kind, a machine
    dict of plain values, and rows of that kind with the keys they are compared by. Pure."""
    if not isinstance(data, dict):
        raise NotAResult(f"holds a JSON {_json_type(data)}, not an object with a bench result")
    kind = data.get("kind")
    if kind not in KINDS:
        shown = repr(kind)[:60]
        raise NotAResult(f"'kind' is {shown}, not one of {', '.join(KINDS)}" if "kind" in data
                         else "no 'kind' key: not written by `fasttrain bench`")
    machine = data.get("machine", {})
    if not isinstance(machine, dict):
        raise NotAResult(f"'machine' is a JSON {_json_type(machine)}, not an object")
    for key in ("hostname", "cpu", "cores", "torch", "fasttrain"):
        _plain(machine.get(key), f"machine.{key}")
    gpus = machine.get("gpus")
    if gpus is not None and not (isinstance(gpus, list) and all(isinstance(g, str) for g in gpus)):
        raise NotAResult("'machine.gpus' is not a list of GPU names")
    _plain(data.get("created_at"), "created_at")
    if kind == "speedups":
        rows = _list_of_objects(data, "rows")
        for i, r in enumerate(rows):
            if not isinstance(r.get("setting"), str) or not r["setting"]:
                raise NotAResult(f"rows[{i}] has no 'setting' name")
            if not isinstance(r.get("status"), str):
                raise NotAResult(f"rows[{i}] ({r['setting'][:60]!r}) has no 'status'")
            _plain(r["setting"], f"rows[{i}].setting")
            for key in ("images_per_s", "speedup"):
                _number(r.get(key), f"rows[{i}].{key}")
    elif kind == "loader":
        points = _list_of_objects(data, "points")
        for i, pt in enumerate(points):
            for key in ("workers", "prefetch", "images_per_s", "ram_bytes"):
                if key not in pt:
                    raise NotAResult(f"points[{i}] has no '{key}'")
            if isinstance(pt["workers"], bool) or not isinstance(pt["workers"], int):
                raise NotAResult(f"points[{i}].workers is not a whole number")
            if pt["prefetch"] is not None and (isinstance(pt["prefetch"], bool) or not isinstance(pt["prefetch"], int)):
                raise NotAResult(f"points[{i}].prefetch is not a whole number")
            _number(pt["images_per_s"], f"points[{i}].images_per_s")
            _number(pt["ram_bytes"], f"points[{i}].ram_bytes")
    else:  # batch
        search = data.get("search", {})
        if not isinstance(search, dict):
            raise NotAResult(f"'search' is a JSON {_json_type(search)}, not an object")
        for key, value in (("batch", data.get("batch")), ("accumulation", data.get("accumulation")),
                           ("search.largest_ok", search.get("largest_ok")),
                           ("search.smallest_failed", search.get("smallest_failed"))):
            _number(value, key)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "number", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)


def _list_of_objects(data: dict[str, Any], key: str) -> list[dict[str, Any]]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise NotAResult(f"'{key}' is not a list of objects")
    return value


def _plain(value: Any, where: str) -> None:
    """A value shown as text: absent, a number, or a short string."""
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return
    if not isinstance(value, str):
        raise NotAResult(f"'{where}' is a JSON {_json_type(value)}, not text")
    if len(value) > _TEXT_LIMIT:
        raise NotAResult(f"'{where}' is {len(value):,} characters long")


def _number(value: Any, where: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise NotAResult(f"'{where}' is a JSON {_json_type(value)}, not a number")


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
    def label(d: dict[str, Any]) -> dict[str, Any]:
        return {"created_at": d.get("created_at"), **{k: d.get("machine", {}).get(k) for k in
                                                      ("hostname", "cpu", "cores", "gpus", "torch", "fasttrain")}}
    return {"kind": a.get("kind"), "a": label(a), "b": label(b), "rows": rows}
