"""Typed records that are written as JSON (summary.json, metrics.jsonl) and read back from files of earlier runs.

A record is a frozen dataclass whose field names are its JSON keys, in the order the file lists them. A field's
metadata says how it travels: `OPTIONAL` (left out of the JSON while None, as the run wrote it before the records
were typed), `nested(Record)` (a record or a list of records, read back with its own `from_json`). Keys a record does
not know land in its `extra` field when it has one, so a file read and written again is the same JSON. A key missing
from an older file keeps the field's default: every field of a record that is read back has one."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol, TypeVar

OPTIONAL: Mapping[str, Any] = {"optional": True}


class Record(Protocol):
    """What `nested()` reads back: a record class with from_json."""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Any: ...


def nested(record: type[Record], *, optional: bool = False) -> Mapping[str, Any]:
    """Field metadata: the value is `record` (or a list of them); `optional`: left out of the JSON while None."""
    return {"record": record, "optional": optional}


def plain(value: Any) -> Any:
    """`value` as JSON holds it: records by their to_json(), tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return value.to_json()  # type: ignore[attr-defined]  # every record here defines to_json
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, Mapping):
        return {key: plain(item) for key, item in value.items()}
    return value


def record_json(record: Any) -> dict[str, Any]:
    """The record's JSON object: its fields in order (an OPTIONAL one only when set), then its `extra` keys."""
    out: dict[str, Any] = {}
    for field in dataclasses.fields(record):
        value = getattr(record, field.name)
        if field.name == "extra" or (value is None and field.metadata.get("optional")):
            continue
        out[field.name] = plain(value)
    out.update(getattr(record, "extra", None) or {})
    return out


R = TypeVar("R")


def _defaults_to_a_value(field: dataclasses.Field[Any]) -> bool:
    """The field's default is not None: a record, a collection, a number or a string."""
    return field.default_factory is not dataclasses.MISSING or (
        field.default is not dataclasses.MISSING and field.default is not None)


def record_from_json(cls: type[R], data: Mapping[str, Any]) -> R:
    """`cls` from a JSON object written by any fasttrain: known keys into their fields (nested records read back),
    unknown ones into `extra` (when `cls` has one), missing ones (and nulls where a value is due) left at their
    defaults."""
    known = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]  # cls is a dataclass
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in data.items():
        field = known.get(key)
        if field is None or key == "extra":
            extra[key] = value
            continue
        if value is None and _defaults_to_a_value(field):
            continue  # null where fasttrain always writes a value (a hand-edited file): the default, not a crash
        record = field.metadata.get("record")
        if record is not None and value is not None:
            value = tuple(record.from_json(v) for v in value) if isinstance(value, list) else record.from_json(value)
        elif isinstance(value, list):
            value = tuple(value)
        values[key] = value
    if "extra" in known:
        values["extra"] = extra
    return cls(**values)
