"""Find, load, merge and override profiles, remembering where every value came from.

Precedence (docs/profiles.md): CLI flag > --set > env FASTTRAIN_* > profile file > extends parent > defaults.
Nothing here imports torch: `fasttrain profiles ...` must answer in well under a second.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from fasttrain.core.errors import Problem, Problems, UserError
from fasttrain.profiles.schema import SECTIONS, Profile, all_dotted_keys, known_keys
from fasttrain.profiles.rules import check_cross_fields
from fasttrain.core.suggest import did_you_mean

ENV_PREFIX = "FASTTRAIN_"
MAX_EXTENDS_DEPTH = 8


def preset_dir() -> Path:
    """The shipped presets: inside the package (so a wheel has them); the repository's profiles/ links here."""
    return Path(str(resources.files("fasttrain") / "profiles" / "builtin"))


def preset_names() -> list[str]:
    return sorted(p.stem for p in preset_dir().glob("*.yaml"))


def preset_path(name: str) -> Path:
    return preset_dir() / f"{name}.yaml"


@dataclass
class Layer:
    """One source of values: its label for `profiles show` and its nested mapping."""

    label: str
    data: dict[str, Any]


@dataclass
class Resolved:
    profile: Profile
    provenance: dict[str, str]
    notes: list[Problem] = field(default_factory=list)
    chain: list[str] = field(default_factory=list)  # sources, base first


def load_yaml(path: Path) -> dict[str, Any]:
    """Parse one profile file; a syntax error names the line and column."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError([Problem(str(path), "no such profile file",
                                 f"give a preset name ({', '.join(preset_names())}) or an existing .yaml path")])
    except OSError as exc:
        raise UserError([Problem(str(path), f"cannot read the file: {exc.strerror}")])
    try:
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise UserError([Problem(where, f"broken YAML: {exc.problem or exc.context}",
                                 "fix the syntax at that line and column")])
    except yaml.YAMLError as exc:
        raise UserError([Problem(str(path), f"broken YAML: {exc}")])
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError([Problem(str(path), f"a profile must be a mapping of sections, not a {type(data).__name__}",
                                 "start with keys such as 'loader:' and 'speed:'")])
    return data


def _locate(ref: str, relative_to: Path | None = None) -> tuple[Path, bool]:
    """A preset name or a file path -> (path, is_preset)."""
    if ref in preset_names():
        return preset_path(ref), True
    path = Path(ref).expanduser()
    if relative_to is not None and not path.is_absolute():
        path = relative_to / path
    if path.suffix in (".yaml", ".yml") or path.exists() or os.sep in ref:
        return path, False
    hint = did_you_mean(ref, preset_names())
    raise UserError([Problem("profile", f"no preset or file named {ref!r}",
                             hint or f"presets: {', '.join(preset_names())}")])


def _file_layers(ref: str, relative_to: Path | None = None, depth: int = 0,
                 seen: tuple[Path, ...] = ()) -> list[Layer]:
    """The file and its `extends` chain, base first."""
    path, is_preset = _locate(ref, relative_to)
    resolved = path.resolve()
    if resolved in seen:
        raise UserError([Problem(str(path), "extends forms a cycle",
                                 "one of the files must not extend the other")])
    if depth > MAX_EXTENDS_DEPTH:
        raise UserError([Problem(str(path), f"extends chain deeper than {MAX_EXTENDS_DEPTH}")])
    data = load_yaml(path)
    if is_preset:
        data.setdefault("name", path.stem)
    parent = data.get("extends")
    layers: list[Layer] = []
    if parent is not None:
        if not isinstance(parent, str):
            raise UserError([Problem(f"{path}: extends", "must be a preset name or a file path", value=parent)])
        layers = _file_layers(parent, path.parent, depth + 1, seen + (resolved,))
        for layer in layers:
            if not layer.label.startswith("parent "):
                layer.label = f"parent {layer.label.split(' ', 1)[1]}"
    label = f"preset {path.stem}" if is_preset else f"file {path}"
    layers.append(Layer(label, data))
    return layers


def _set_dotted(target: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = target
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node = child
    node[parts[-1]] = value


def parse_set(items: list[str]) -> Layer:
    """`--set loader.batch_size=384` items; values are parsed as YAML (384 -> int, true -> bool, null -> None)."""
    data: dict[str, Any] = {}
    problems = Problems()
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.add(f"--set {item}", "expected KEY=VALUE", "e.g. --set loader.batch_size=384")
            continue
        try:
            value = yaml.safe_load(raw) if raw.strip() else None
        except yaml.YAMLError:
            value = raw
        _set_dotted(data, key, value)
    if problems.errors:
        raise UserError(problems.items)
    return Layer("--set", data)


def env_layers(env: Mapping[str, str]) -> list[Layer]:
    """FASTTRAIN_LOADER__BATCH_SIZE=384 -> loader.batch_size. Variables without '__' are not profile keys."""
    layers = []
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        dotted = name[len(ENV_PREFIX):].lower().replace("__", ".")
        try:
            value = yaml.safe_load(env[name])
        except yaml.YAMLError:
            value = env[name]
        data: dict[str, Any] = {}
        _set_dotted(data, dotted, value)
        layers.append(Layer(f"env {name}", data))
    return layers


def _merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and key in SECTIONS and not prefix:
            flat.update(_flatten(value, f"{dotted}."))
        else:
            flat[dotted] = value
    return flat


def _problem_from_pydantic(err: dict[str, Any], provenance: Mapping[str, str]) -> Problem:
    loc = [str(p) for p in err["loc"]]
    dotted = ".".join(loc[:2]) if loc and loc[0] in SECTIONS else (loc[0] if loc else "profile")
    source = provenance.get(dotted)
    where = dotted if not source or source.startswith(("preset", "file", "parent")) else f"{dotted} ({source})"
    kind = err["type"]
    value = err.get("input")
    if kind == "extra_forbidden":
        section = loc[0] if len(loc) > 1 and loc[0] in SECTIONS else None
        key = loc[-1]
        hint = did_you_mean(key, known_keys(section))
        if not hint:
            homes = [k for k in all_dotted_keys() if k.endswith(f".{key}")]
            hint = f"it belongs under {homes[0].split('.')[0]}:" if homes else ""
        allowed = ", ".join(known_keys(section))
        return Problem(where, "unknown key", hint or f"known keys here: {allowed}")
    if kind == "literal_error":
        allowed = err.get("ctx", {}).get("expected", "")
        choices = [c.strip(" '") for c in allowed.replace(" or ", ",").split(",") if c.strip(" '")]
        hint = did_you_mean(str(value), choices)
        return Problem(where, f"unknown name {value!r}", f"{hint + ' ' if hint else ''}choose one of {allowed}")
    msg = err["msg"]
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return Problem(where, msg.lower(), "change the value", value)
    return Problem(where, msg[0].lower() + msg[1:], "", value if kind != "missing" else None)


def build(layers: list[Layer]) -> Resolved:
    """Merge layers (lowest precedence first), validate everything, and report all problems at once."""
    merged: dict[str, Any] = {}
    provenance: dict[str, str] = {k: "default" for k in all_dotted_keys()}
    for layer in layers:
        merged = _merge(merged, layer.data)
        for dotted in _flatten(layer.data):
            provenance[dotted] = layer.label
    problems = Problems()
    profile: Profile | None = None
    try:
        profile = Profile.model_validate(merged)
    except ValidationError as exc:
        for err in exc.errors():
            problems.items.append(_problem_from_pydantic(err, provenance))
    check_cross_fields(merged, problems)
    if problems.errors or profile is None:
        raise UserError(problems.items)
    return Resolved(profile, provenance, problems.notes, [layer.label for layer in layers])


def resolve(ref: str, sets: list[str] | None = None, env: Mapping[str, str] | None = None,
            flags: Mapping[str, Any] | None = None) -> Resolved:
    """Profile `ref` (preset name or file) + env + --set + explicit flags, validated."""
    layers = _file_layers(ref)
    layers += env_layers(os.environ if env is None else env)
    if sets:
        layers.append(parse_set(sets))
    for dotted, (flag, value) in (flags or {}).items():
        data: dict[str, Any] = {}
        _set_dotted(data, dotted, value)
        layers.append(Layer(f"flag {flag}", data))
    return build(layers)


def resolve_file_only(ref: str) -> Resolved:
    """A file exactly as written (with its parents), no env or flags: what `profiles validate` checks."""
    return build(_file_layers(ref))
