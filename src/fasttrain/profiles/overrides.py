"""Values given outside a profile file: `--set SECTION.KEY=VALUE` items and FASTTRAIN_SECTION__KEY variables.

Each is read into nested values ({"loader": {"batch_size": 384}}), the value parsed as YAML with the same bounds
as a file; every bad key or value is reported at once. profiles/presets.py layers them over the file.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fasttrain.core.errors import Problem, Problems, UserError, clip, shown_value
from fasttrain.profiles.yaml_reader import parse_yaml

ENV_PREFIX = "FASTTRAIN_"
_KEY_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


def set_dotted(target: dict[str, Any], dotted: str, value: Any) -> None:
    """target[a][b] = value for dotted "a.b", creating (or replacing non-mapping) parents."""
    parts = dotted.split(".")
    node = target
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def check_key(dotted: str) -> str | None:
    """Why `dotted` cannot be a profile key (None when it can): SECTION.KEY or a top-level key."""
    if not dotted:
        return "empty key"
    if dotted == "extends":  # read from a profile file only: as an override it would change nothing
        return "extends is read from a profile file only, not here; use --profile NAME, or a file with `extends: NAME`"
    parts = dotted.split(".")
    if "" in parts:
        return "empty part in the key (a leading, trailing or doubled '.')"
    if len(parts) > 2:
        return "too many dots: keys are SECTION.KEY (e.g. loader.batch_size) or a top-level key (e.g. name)"
    for part in parts:
        if not _KEY_PART.fullmatch(part):
            return f"{shown_value(part)} is not a key name (letters, digits and '_' only)"
    return None


def parse_value(raw: str, where: str, example: str) -> Any:
    """A --set or env value, read as YAML with the same bounds as a file; broken YAML is an error."""
    if not raw.strip():
        return None
    try:
        return parse_yaml(raw, where)
    except UserError as exc:
        problem = exc.problems[0]
        raise UserError([Problem(where, problem.message.replace("broken YAML", "value is not valid YAML"),
                                 f"quote it as a YAML string, e.g. {example}", raw)]) from None


def set_values(items: list[str]) -> dict[str, Any]:
    """`--set loader.batch_size=384` items -> nested values; values are parsed as YAML (384 -> int, true -> bool,
    null -> None)."""
    data: dict[str, Any] = {}
    problems = Problems()
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        where = f"--set {clip(item, 60)}"
        if not sep:
            problems.add(where, "expected KEY=VALUE (no '=')", "e.g. --set loader.batch_size=384")
            continue
        why = check_key(key)
        if why:
            problems.add(where, why, "e.g. --set loader.batch_size=384")
            continue
        try:
            value = parse_value(raw, where, f"--set '{key}=\"...\"'")
        except UserError as exc:
            problems.items += exc.problems
            continue
        set_dotted(data, key, value)
    if problems.errors:
        raise UserError(problems.items)
    return data


def env_values(env: Mapping[str, str]) -> list[tuple[str, dict[str, Any]]]:
    """FASTTRAIN_LOADER__BATCH_SIZE=384 -> ("env FASTTRAIN_LOADER__BATCH_SIZE", {"loader": {"batch_size": 384}}), one
    pair per variable, sorted by name. Variables without '__' are not profile keys."""
    found = []
    problems = Problems()
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        dotted = name[len(ENV_PREFIX):].lower().replace("__", ".")
        why = check_key(dotted)
        if why:
            problems.add(f"env {clip(name, 60)}", f"not a profile key: {why}",
                         "name it FASTTRAIN_SECTION__KEY, e.g. FASTTRAIN_LOADER__BATCH_SIZE, or unset it")
            continue
        try:
            value = parse_value(env[name], f"env {name}", f"{name}='\"...\"'")
        except UserError as exc:
            problems.items += exc.problems
            continue
        data: dict[str, Any] = {}
        set_dotted(data, dotted, value)
        found.append((f"env {name}", data))
    if problems.errors:
        raise UserError(problems.items)
    return found
