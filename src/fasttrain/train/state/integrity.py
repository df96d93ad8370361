"""What makes a loaded checkpoint trustworthy: its checksum, the types of its fields, its position in the run.

Checksum: SHA-256 over the payload's content in a fixed walk (every tensor's dtype, shape and raw bytes;
numpy arrays likewise; plain values by repr; dict keys in order), stored in the payload as "checksum" and
recomputed on load. A byte flipped anywhere inside a tensor's data (which torch's loader does not notice)
changes it. It costs one pass of SHA-256 over the weights (~1 GB/s per core) on save and on load. A checkpoint
written before checksums existed has none: it loads, with the note "no checksum".
Schema: the fields a resume reads are checked for their types (a hand-edited or foreign payload gives one
line naming the field, not a TypeError deep in the loop).
The position recorded inside the file (run_state.Position) ranks files for `--resume auto`, never their times.
"""
from __future__ import annotations

import hashlib
from typing import Any

import torch

CHECKSUM_KEY = "checksum"
CHECKSUM_ALGO = "sha256-content-v1"
NO_CHECKSUM = "no checksum"


def to_host(value: Any, *, copy: bool = False) -> Any:
    """`value` with every tensor in it on the host, copied once: device tensors start their copies without waiting
    (non_blocking, into pinned memory) and one synchronize ends them all, where hashing each tensor on its device
    made a copy and a sync per tensor, and torch.save another copy of everything. Host tensors are kept as they are,
    or cloned with `copy` (a snapshot the owner's later in-place changes do not reach: the best weights).
    Dicts, lists and tuples are rebuilt; anything else is returned as is. Pure but for the copies."""
    waits: list[torch.device] = []

    def walk(v: Any) -> Any:
        if torch.is_tensor(v):
            if v.device.type == "cpu":
                return v.detach().clone() if copy else v
            if v.device.type == "cuda":
                waits.append(v.device)
            return v.detach().to("cpu", non_blocking=v.device.type == "cuda")
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        if type(v) in (list, tuple):  # exactly: a namedtuple is kept as it is
            return type(v)(walk(x) for x in v)
        return v

    out = walk(value)
    for device in set(waits):
        torch.cuda.synchronize(device)
    return out


def _feed(h: Any, value: Any) -> None:
    if torch.is_tensor(value):
        t = value.detach()
        t = (t if t.device.type == "cpu" else t.cpu()).contiguous()  # save_atomic hands over host tensors
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(value, dict):
        h.update(b"{%d" % len(value))
        for k, v in value.items():
            h.update(repr(k).encode())
            _feed(h, v)
        h.update(b"}")
    elif isinstance(value, (list, tuple)):
        h.update(b"[%d" % len(value))
        for v in value:
            _feed(h, v)
        h.update(b"]")
    elif value is None or isinstance(value, (bool, int, float, str, bytes)):
        h.update(f"{type(value).__name__}:{value!r};".encode())
    elif hasattr(value, "tobytes") and hasattr(value, "dtype"):  # numpy arrays and scalars (RNG state)
        h.update(f"N{value.dtype}{getattr(value, 'shape', ())}".encode())
        h.update(value.tobytes())
    else:  # anything else: its type only (a repr may hold a memory address)
        h.update(f"O{type(value).__qualname__};".encode())


def content_digest(payload: dict[str, Any]) -> str:
    """SHA-256 of everything in `payload` but its own checksum entry."""
    h = hashlib.sha256()
    _feed(h, {k: v for k, v in payload.items() if k != CHECKSUM_KEY})
    return h.hexdigest()


def with_checksum(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, CHECKSUM_KEY: {"algo": CHECKSUM_ALGO, "sha256": content_digest(payload)}}


def verify_checksum(payload: dict[str, Any]) -> str | None:
    """None when the checksum matches; NO_CHECKSUM for an older file without one; else what is wrong."""
    stored = payload.get(CHECKSUM_KEY)
    if stored is None:
        return NO_CHECKSUM
    if not isinstance(stored, dict) or stored.get("algo") != CHECKSUM_ALGO or not isinstance(stored.get("sha256"), str):
        return f"its checksum entry is not one this fasttrain writes ({str(stored)[:60]})"
    if content_digest(payload) != stored["sha256"]:
        return "corrupt: its content does not match its SHA-256 checksum (a flipped or overwritten byte)"
    return None


# field -> (allowed types, required for a resume). bool is excluded from int below.
_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "format_version": ((int,), False),
    "model": ((dict,), True),
    "optimizer": ((dict,), True),
    "schedule": ((dict,), True),
    "epoch": ((int,), True),
    "batch_in_epoch": ((int,), True),
    "step": ((int,), False),
    "scaler": ((dict, type(None)), False),
    "partial": ((dict, type(None)), False),
    "rng": ((dict, type(None)), False),
    "plan": ((dict, type(None)), False),
    "metrics": ((dict, type(None)), False),
    "rng_per_rank": ((list, type(None)), False),
    "profile": ((dict, type(None)), False),
    "micro_batch_splits": ((int, type(None)), False),
    "oom_events": ((list, type(None)), False),
    "nonfinite_total": ((int, type(None)), False),
    "fit": ((dict, type(None)), False),
    "args": ((dict, type(None)), False),
    "sampler": ((dict, type(None)), False),
    "budget_used_s": ((int, float, type(None)), False),
    "clock_s": ((int, float, type(None)), False),
    "saved_at": ((int, float, type(None)), False),
    "ema": ((dict, type(None)), False),
    "versions": ((dict,), False),
}
_NESTED: dict[str, dict[str, tuple[type, ...]]] = {
    "fit": {"history": (list,), "stale": (int,), "best_epoch": (int, type(None)),
            "best_acc1": (float, int, type(None))},
    "schedule": {"step": (int,)},
}


def _type_name(value: Any) -> str:
    return type(value).__name__


def _bad(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return True
    return not isinstance(value, types)


def schema_problem(payload: dict[str, Any], complete: bool) -> str | None:
    """The first field with a wrong type (or, with `complete`, missing) as one phrase; None when all fit."""
    for name, (types, required) in _FIELDS.items():
        if name not in payload:
            if required and complete:
                return f"field '{name}' is missing"
            continue
        value = payload[name]
        if _bad(value, types):
            want = " or ".join("null" if t is type(None) else t.__name__ for t in types)
            return f"field '{name}' should be {want}, found {_type_name(value)} {str(value)[:40]!r}"
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            return f"field '{name}' should not be negative, found {value}"
        for sub, sub_types in _NESTED.get(name, {}).items():
            if isinstance(value, dict) and sub in value and _bad(value[sub], sub_types):
                want = " or ".join("null" if t is type(None) else t.__name__ for t in sub_types)
                return f"field '{name}.{sub}' should be {want}, found {_type_name(value[sub])} {str(value[sub])[:40]!r}"
    if isinstance(payload.get("fit"), dict):
        for i, row in enumerate(payload["fit"].get("history") or []):
            if not isinstance(row, dict):
                return f"field 'fit.history[{i}]' should be dict, found {_type_name(row)}"
    return None
