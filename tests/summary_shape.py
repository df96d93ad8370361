"""The shape of a run's JSON with its values masked: each value becomes its JSON type ("int", "float", "str",
"bool", "null"), a list the merged shape of its items. tests/test_summary_json.py compares today's output with the
shape recorded in tests/fixtures/summary_json_baseline.json before the summary and the rows became typed records."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

BASELINE = Path(__file__).resolve().parent / "fixtures" / "summary_json_baseline.json"
RUNS = ("plain", "budget", "stopped", "resumed")  # the runs tests/test_summary_json.py makes, in order


def shape(value: Any) -> Any:
    """`value` with its leaves replaced by their JSON type; a list's items merged into one shape: [] when empty."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        merged: Any = None
        for item in value:
            merged = shape(item) if merged is None else merge(merged, shape(item))
        return [] if merged is None else [merged]
    if value is None:
        return "null"
    return {bool: "bool", int: "int", float: "float", str: "str"}[type(value)]


def merge(a: Any, b: Any) -> Any:
    """Two shapes as one: dicts by key (a key in either), lists by their items, leaves as "float|null"."""
    if isinstance(a, dict) and isinstance(b, dict):
        return {key: merge(a[key], b[key]) if key in a and key in b else a.get(key, b.get(key)) for key in {**a, **b}}
    if isinstance(a, list) and isinstance(b, list):
        return a or b if not (a and b) else [merge(a[0], b[0])]
    return "|".join(sorted(set(str(a).split("|")) | set(str(b).split("|"))))


def differences(old: Any, new: Any, where: str = "") -> list[str]:
    """How `new`'s shape departs from `old`'s: keys lost or added, nesting or type changed. A null on either side is
    an optional value that happened to be empty, not a change; an empty list says nothing about its items."""
    if isinstance(old, dict) or isinstance(new, dict):
        if not (isinstance(old, dict) and isinstance(new, dict)):
            return [f"{where or 'top'}: {old!r} became {new!r}"]
        out = [f"{where}.{k}: lost" for k in old.keys() - new.keys()]
        out += [f"{where}.{k}: new" for k in new.keys() - old.keys()]
        for key in old.keys() & new.keys():
            out += differences(old[key], new[key], f"{where}.{key}")
        return out
    if isinstance(old, list) or isinstance(new, list):
        if not (isinstance(old, list) and isinstance(new, list)):
            return [f"{where}: {old!r} became {new!r}"]
        return differences(old[0], new[0], f"{where}[]") if old and new else []
    old_types, new_types = set(old.split("|")) - {"null"}, set(new.split("|")) - {"null"}
    return [] if not old_types or not new_types or new_types <= old_types else [f"{where}: {old} became {new}"]


def run_shapes(stdout: str, run_dir: Path) -> dict[str, Any]:
    """One run's shapes: what `--json` printed, summary.json, and metrics.jsonl's rows by kind (with the order of the
    keys of each kind, as a line reader sees them)."""
    rows: dict[str, Any] = {}
    order: dict[str, list[str]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        kind = row["kind"]
        rows[kind] = merge(rows[kind], shape(row)) if kind in rows else shape(row)
        order.setdefault(kind, list(row))
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"stdout": shape(json.loads(stdout)), "summary.json": shape(summary),
            "metrics.jsonl": rows, "metrics.jsonl key order": order}
