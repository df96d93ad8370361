"""Pydantic's validation errors as the project's one-line Problems: the dotted key, where its value came from,
what is wrong and the fix (a did-you-mean for an unknown key or name, the section a misplaced key belongs in)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fasttrain.core.errors import Problem, shown_value
from fasttrain.core.suggest import did_you_mean
from fasttrain.profiles.schema import SECTIONS, all_dotted_keys, known_keys


def problem_from_pydantic(err: Mapping[str, Any], provenance: Mapping[str, str]) -> Problem:
    """One pydantic error (ValidationError.errors() item) as a Problem; `provenance`: dotted key -> its source."""
    loc = [str(p) for p in err["loc"]]
    dotted = ".".join(loc[:2]) if loc and loc[0] in SECTIONS else (loc[0] if loc else "profile")
    source = provenance.get(dotted)
    where = dotted if not source or source.startswith(("preset", "file", "parent")) else f"{dotted} ({source})"
    kind = err["type"]
    value = err.get("input")
    if kind == "extra_forbidden":
        section = loc[0] if len(loc) > 1 and loc[0] in SECTIONS else None
        key = loc[-1]
        # the full key, as it is typed after --set or in a file's section: `loader.batch_size`, not `batch_size`
        typed_whole = source is not None and source.startswith(
            ("--set", "env")
        )  # `--set loader.batch_size=`, not a file
        hint = did_you_mean(key, [f"{section}.{k}" if section and typed_whole else k for k in known_keys(section)])
        if not hint:
            homes = [k for k in all_dotted_keys() if k.endswith(f".{key}")]
            hint = f"it belongs under {homes[0].split('.')[0]}: ({homes[0]})" if homes else ""
        allowed = ", ".join(known_keys(section))
        return Problem(where, "unknown key", hint or f"known keys here: {allowed}", value)
    if kind == "literal_error":
        allowed = err.get("ctx", {}).get("expected", "")
        choices = [c.strip(" '") for c in allowed.replace(" or ", ",").split(",") if c.strip(" '")]
        hint = did_you_mean(str(value), choices) if isinstance(value, str) else ""
        return Problem(
            where, f"unknown name {shown_value(value)}", f"{hint + ' ' if hint else ''}choose one of {allowed}"
        )
    msg = err["msg"]
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return Problem(where, msg.lower(), "change the value", value)
    fix = _FIXES.get(kind, "")
    if kind == "missing" and len(loc) > 2 and loc[0] in SECTIONS:  # an item of a [min, max] pair
        return Problem(where, "too few items", _FIXES["too_short"], value)
    if kind == "bad_range":
        fix = err.get("ctx", {}).get("fix", "")
    if kind == "string_pattern_mismatch" and "x00" in str(err.get("ctx", {}).get("pattern", "")):
        return Problem(where, "contains control characters (NUL, escape, ...)", "remove them", value)
    return Problem(where, msg[0].lower() + msg[1:], fix, value if kind != "missing" else None)


_FIXES = {
    "finite_number": "use a finite number (not .inf or .nan)",
    "string_too_long": "shorten it",
    "string_too_short": "give a non-empty name, or remove the key",
    "string_pattern_mismatch": 'write it as MAJOR.MINOR in quotes, e.g. "8.6"',
    "int_from_float": "use a whole number",
    "tuple_type": "give a list of two numbers, e.g. [0.08, 1.0]",
    "too_long": "give exactly two numbers, e.g. [0.08, 1.0]",
    "too_short": "give exactly two numbers, e.g. [0.08, 1.0]",
}
