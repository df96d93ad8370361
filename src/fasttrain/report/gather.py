"""A run folder read into one typed record: summary.json, metrics.jsonl (step and epoch rows), model.json and
tuning.json. A file that is missing or unreadable is named in `missing` and the rest is used: a run stopped before
its first epoch, one that crashed mid-row, one resumed (its metrics.jsonl spans two processes) all give a record."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttrain.core.errors import Problem, UserError
from fasttrain.train.loop.epoch_row import EpochRow
from fasttrain.train.run.summary_record import RunSummary

SUMMARY, METRICS, MODEL, TUNING, PROFILE = "summary.json", "metrics.jsonl", "model.json", "tuning.json", "profile.yaml"
REPORT_FILE = "report.html"


@dataclass
class RunRecord:
    """One run as its folder holds it: its summary read back (an empty RunSummary without summary.json); rows keep
    metrics.jsonl's keys (seconds, bytes, fractions 0..1)."""

    path: Path
    summary: RunSummary = field(default_factory=RunSummary)
    rows: list[dict[str, Any]] = field(default_factory=list)     # metrics.jsonl's rows, in file order
    model: dict[str, Any] = field(default_factory=dict)
    tuning: dict[str, Any] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)             # "metrics.jsonl: not there", ...
    profile_text: str = ""                                        # profile.yaml: the settings as resolved

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The logged steps ("kind": "step"), in file order."""
        return [r for r in self.rows if r.get("kind") == "step"]

    @property
    def has_summary(self) -> bool:
        return self.summary != RunSummary()

    @property
    def epoch_lines(self) -> list[dict[str, Any]]:
        """metrics.jsonl's epoch lines as written ("kind": "epoch", "time": the stamp of the write)."""
        return [r for r in self.rows if r.get("kind") == "epoch"]

    @property
    def epochs(self) -> list[EpochRow]:
        """The epoch rows of metrics.jsonl; summary.json's history where metrics.jsonl has none."""
        return [EpochRow.from_json(r) for r in self.epoch_lines] or list(self.summary.history)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def label(self) -> str:
        """How the run is named beside its curves: `folder (profile, model)`; a profile file by its name only (a
        resumed run's summary names it by its whole path)."""
        profile = Path(self.summary.profile).name if self.summary.profile else None
        what = ", ".join(str(v) for v in (profile, self.summary.model) if v)
        return f"{self.name} ({what})" if what else self.name

    @property
    def class_names(self) -> list[str]:
        names = self.model.get("class_names") or [c.name for c in self.summary.per_class or ()]
        return [str(n) for n in names]


def _json_file(path: Path, missing: list[str]) -> dict[str, Any]:
    if not path.exists():
        missing.append(f"{path.name}: not there")
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        missing.append(f"{path.name}: unreadable ({type(exc).__name__})")
        return {}
    return value if isinstance(value, dict) else {}


def _summary(path: Path, missing: list[str]) -> RunSummary:
    """summary.json read back (RunSummary.from_json); an empty one when it is missing or not a summary."""
    data = _json_file(path, missing)
    try:
        return RunSummary.from_json(data)
    except (TypeError, ValueError, AttributeError) as exc:  # a nested part that is no object or list
        missing.append(f"{path.name}: unreadable ({type(exc).__name__})")
        return RunSummary()


def _rows(path: Path, missing: list[str]) -> list[dict[str, Any]]:
    """metrics.jsonl's rows; a line cut short (a crash, a full disk) is left out."""
    if not path.exists():
        missing.append(f"{path.name}: not there")
        return []
    rows = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict):
                rows.append(row)
    return rows


def is_run_folder(path: Path) -> bool:
    return path.is_dir() and ((path / SUMMARY).is_file() or (path / METRICS).is_file())


def run_problem(path: Path) -> Problem | None:
    """Why `path` is no run folder, or None."""
    if not path.exists():
        return Problem("RUN", "does not exist", "give a run folder, e.g. runs/NAME", str(path))
    if not is_run_folder(path):
        return Problem("RUN", f"is not a run folder (no {SUMMARY} or {METRICS})",
                       "give a folder `fasttrain train` wrote, e.g. runs/NAME", str(path))
    return None


def gather_run(path: Path | str) -> RunRecord:
    """The record of one run folder; UserError when it is no run folder."""
    path = Path(path)
    problem = run_problem(path)
    if problem is not None:
        raise UserError([problem])
    missing: list[str] = []
    summary = _summary(path / SUMMARY, missing)
    rows = _rows(path / METRICS, missing)
    model = _json_file(path / MODEL, []) if (path / MODEL).exists() else {}
    tuning = _json_file(path / TUNING, []) if (path / TUNING).exists() else {}
    try:
        profile = (path / PROFILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        profile = ""
    return RunRecord(path, summary, rows, model, tuning, missing, profile)


def gather_runs(paths: list[Path]) -> list[RunRecord]:
    """Every run, or one UserError naming each path that is not one (and no runs at all)."""
    if not paths:
        raise UserError([Problem("RUN", "no run given", "name one or more run folders, e.g. runs/NAME")])
    problems = [p for p in (run_problem(Path(path)) for path in paths) if p is not None]
    if problems:
        raise UserError(problems)
    return [gather_run(path) for path in paths]
