"""The measurement cache: what trials and benchmarks measured on this machine, for every command to read.

One JSON file, `tuning.json` under the fasttrain cache directory (core/cache_dir.py), written atomically
(core/files.write_text_atomic). An entry is keyed by the machine (CPU model, usable cores, GPU name), the model,
the kind of data, the image size, the batch and the torch version: a new torch, another GPU or another model is
another key, so a stale measurement is never read for it (invalidation by key). A file from another schema, or
one that does not parse, reads as empty and is rewritten on the next record.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from fasttrain.core.cache_dir import default_cache_dir, writable_cache_dir
from fasttrain.core.files import write_text_atomic
from fasttrain.hardware.report import HardwareReport

CACHE_FILE = "tuning.json"
SCHEMA = 1
# The model of a measurement that depends on no model (`bench loader`: what the input pipeline delivers).
LOADER_MODEL = "any"


@dataclass(frozen=True)
class TrialKey:
    machine: str       # machine_id(report)
    model: str
    data_kind: str     # synthetic | shapes | images | custom
    image_size: int
    batch: int
    torch: str

    def text(self) -> str:
        return "|".join(str(v) for v in (self.machine, self.model, self.data_kind, self.image_size, self.batch,
                                          self.torch))


# A measured setting's value: True (switched on), a count (workers, threads) or a name (a precision).
SettingValue = bool | int | str


@dataclass(frozen=True)
class Measurement:
    """One setting measured here: `ratio` is images/s with `value` over images/s without it (>1: faster)."""

    setting: str       # workers | threads | precision | channels_last | fused_optimizer | compile | cudnn_benchmark
    value: SettingValue
    ratio: float
    source: str        # "train trial" | "bench speedups" | "bench loader"
    date: str          # YYYY-MM-DD
    detail: str = ""   # e.g. "compile 41 s, saves 0.02 s/step"
    on: str = ""       # what it was measured on, e.g. "tiny_cnn, 32 px, batch 64" (machine_measurements fills it)
    # The value it was timed against (the trial: the plan's; bench speedups: off). None: False for a bool value,
    # else unknown. It makes the measurement also say how `against` does (advice.latest: 1 / ratio).
    against: SettingValue | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def machine_id(report: HardwareReport) -> str:
    """CPU model, usable cores and the training GPU's name: what makes a measurement this machine's. Pure."""
    gpu = report.training_gpu()
    return f"{report.cpu.model} x{report.cores} | {gpu.name if gpu is not None else 'no GPU'}"


def loader_key(report: HardwareReport, data_kind: str, image_size: int, batch: int) -> TrialKey:
    """The key of a loader measurement (`bench loader` writes it, train's plan reads it): this machine and torch,
    the data kind, image size and batch; no model (LOADER_MODEL). Pure."""
    return TrialKey(machine_id(report), LOADER_MODEL, data_kind, image_size, batch, report.torch.version or "unknown")


def cache_path(root: Path | None = None) -> Path:
    return (root if root is not None else default_cache_dir()) / CACHE_FILE


def load_cache(root: Path | None = None) -> dict[str, Any]:
    """The cache's entries by key text; {} when there is none, it is damaged, or of another schema."""
    path = cache_path(root)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("entries"), dict):
        return {}
    return data["entries"]


def lookup(key: TrialKey, root: Path | None = None) -> dict[str, Any] | None:
    entry = load_cache(root).get(key.text())
    return entry if isinstance(entry, dict) else None


def record(key: TrialKey, *, measurements: list[Measurement], choice: dict[str, Any] | None = None,
           trial: dict[str, Any] | None = None, root: Path | None = None) -> Path:
    """Merge measurements (a newer one of the same setting replaces the older) and the trial's choice into the
    entry of `key`; -> the cache file."""
    root = writable_cache_dir(root)
    entries = load_cache(root)
    entry = entries.get(key.text()) or {"key": asdict(key), "measurements": []}
    kept = [m for m in entry.get("measurements", []) if m.get("setting") not in {n.setting for n in measurements}]
    entry["measurements"] = kept + [m.to_dict() for m in measurements]
    if choice is not None:
        entry["choice"] = choice
    if trial is not None:
        entry["trial"] = trial
    entries[key.text()] = entry
    return write_text_atomic(cache_path(root), json.dumps({"schema": SCHEMA, "entries": entries}, indent=1))


def measured_on(key: dict[str, Any]) -> str:
    """`tiny_cnn, 32 px, batch 64` from a cache entry's key (the loader's model "any" is left out). Pure."""
    model = key.get("model")
    parts = [str(model)] if model and model != LOADER_MODEL else []
    if key.get("image_size"):
        parts.append(f"{key['image_size']} px")
    if key.get("batch"):
        parts.append(f"batch {key['batch']}")
    return ", ".join(parts)


def entry_measurements(entry: dict[str, Any] | None) -> list[Measurement]:
    out = []
    for raw in (entry or {}).get("measurements", []):
        try:
            out.append(Measurement(**raw))
        except TypeError:
            continue
    return out


def machine_measurements(entries: dict[str, Any], machine: str, torch: str | None,
                         model: str | None = None) -> list[Measurement]:
    """Every measurement made on this machine with this torch (and this model, when given), newest last: what
    doctor, bench, estimate and train's verdict advise from. Pure over the loaded entries."""
    found: list[Measurement] = []
    for entry in entries.values():
        key = entry.get("key") or {} if isinstance(entry, dict) else {}
        if key.get("machine") != machine or (torch is not None and key.get("torch") != torch):
            continue
        if model is not None and key.get("model") != model:
            continue
        on = measured_on(key)
        found.extend(replace(m, on=on) for m in entry_measurements(entry))
    return sorted(found, key=lambda m: m.date)
