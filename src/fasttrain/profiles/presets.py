"""Find, load, merge and override profiles, remembering where every value came from.

Precedence (docs/profiles.md): CLI flag > --set > env FASTTRAIN_* > profile file > extends parent > defaults.
Nothing here imports torch: `fasttrain profiles ...` must answer in well under a second.
"""
from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fasttrain.core.errors import Problem, Problems, UserError, clip, shown_value
from fasttrain.profiles.schema import SECTIONS, Profile, all_dotted_keys, known_keys
from fasttrain.profiles.rules import check_cross_fields
from fasttrain.profiles.yaml_reader import MAX_PROFILE_BYTES, parse_yaml
from fasttrain.core.suggest import did_you_mean

ENV_PREFIX = "FASTTRAIN_"
MAX_EXTENDS_DEPTH = 8

# Bounds on the work one profile may cause: a profile is a few dozen keys, three levels deep, a few KiB.
MAX_PROBLEMS = 20                  # problems listed per resolution, then "... and N more"
MAX_REF_CHARS = 1024               # a preset name or a path in --profile / extends
_KEY_PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


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
    layers: list[Layer] = field(default_factory=list, repr=False)  # what it was built from, lowest first

    def user_set(self, key: str) -> bool:
        """Whether the user chose this dotted key's value (a flag, --set, a variable, a profile file), not the
        preset or the default: the one answer train, its tuning trial and its thread A/B go by."""
        return not self.provenance.get(key, "default").startswith(("preset", "default"))

    def with_flags(self, flags: Mapping[str, tuple[str, Any]]) -> Resolved:
        """The same sources with these flags on top ({dotted key: (label, value)}), validated again: files and
        the environment are not read again."""
        return build(self.layers + flag_layers(flags))


def read_profile_text(path: Path) -> str:
    """The file's text: at most MAX_PROFILE_BYTES, UTF-8, or a UserError saying which of those it is not."""
    try:
        with open(path, "rb") as fh:
            kind = os.fstat(fh.fileno()).st_mode
            if not (stat.S_ISREG(kind) or stat.S_ISFIFO(kind)):  # /dev/zero, a terminal, a socket
                raise UserError([Problem(str(path), "not a regular file", "give a .yaml file")])
            raw = fh.read(MAX_PROFILE_BYTES + 1)
    except FileNotFoundError:
        raise UserError([Problem(str(path), "no such profile file",
                                 f"give a preset name ({', '.join(preset_names())}) or an existing .yaml path")]) from None
    except IsADirectoryError:
        raise UserError([Problem(str(path), "is a directory, not a profile file", "give a .yaml file")]) from None
    except OSError as exc:
        raise UserError([Problem(str(path), f"cannot read the file: {exc.strerror or exc}")]) from None
    except ValueError as exc:  # embedded null byte
        raise UserError([Problem(str(path), f"not a usable file name ({exc})")]) from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise UserError([Problem(str(path), f"larger than {MAX_PROFILE_BYTES:,} bytes (1 MiB), too large for a profile",
                                 "a profile is a few dozen keys; check that this is the right file")])
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError([Problem(str(path), f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start:,})",
                                 "save the file as UTF-8; a profile is a YAML text file")]) from None


def load_yaml(path: Path) -> dict[str, Any]:
    """Parse one profile file; a syntax error names the line and column."""
    data = parse_yaml(read_profile_text(path), str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError([Problem(str(path), f"a profile must be a mapping of sections, not a {type(data).__name__}",
                                 "start with keys such as 'loader:' and 'speed:'")])
    return data


def _check_ref(ref: object, where: str) -> str:
    """A preset name or a path as written in --profile or `extends:`; junk gets one clear line."""
    fix = f"give a preset name ({', '.join(preset_names())}) or a path to a .yaml file"
    if not isinstance(ref, str):
        raise UserError([Problem(where, "must be a preset name or a file path, not a "
                                 f"{type(ref).__name__}", fix, ref)])
    if not ref.strip():
        raise UserError([Problem(where, "is empty", fix)])
    if "\0" in ref:
        raise UserError([Problem(where, "contains a NUL byte, which no file name can", fix, ref)])
    if len(ref) > MAX_REF_CHARS:
        raise UserError([Problem(where, f"is {len(ref):,} characters long, more than a path can be "
                                 f"({MAX_REF_CHARS:,} at most here)", fix, ref)])
    return ref


def _locate(ref: str, relative_to: Path | None = None) -> tuple[Path, bool]:
    """A preset name or a file path -> (path, is_preset)."""
    if ref in preset_names():
        return preset_path(ref), True
    try:
        path = Path(ref).expanduser()
        if relative_to is not None and not path.is_absolute():
            path = relative_to / path
        if path.suffix in (".yaml", ".yml") or path.exists() or os.sep in ref:
            return path, False
    except (OSError, ValueError, RuntimeError) as exc:  # name too long, NUL, ~user that does not exist
        raise UserError([Problem("profile", f"cannot use {ref!r} as a path ({clip(str(exc), 80)})",
                                 "give a preset name or an existing .yaml path")]) from None
    hint = did_you_mean(ref, preset_names())
    raise UserError([Problem("profile", f"no preset or file named {shown_value(ref)}",
                             hint or f"presets: {', '.join(preset_names())}")])


def _file_layers(ref: str, relative_to: Path | None = None, depth: int = 0,
                 seen: tuple[Path, ...] = ()) -> list[Layer]:
    """The file and its `extends` chain, base first."""
    path, is_preset = _locate(ref, relative_to)
    try:
        resolved = path.resolve()
    except (OSError, ValueError, RuntimeError) as exc:  # a symlink loop, a name too long
        raise UserError([Problem(str(path), f"cannot resolve this path ({clip(str(exc), 80)})")]) from None
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
        parent = _check_ref(parent, f"{path}: extends")
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


def _check_key(dotted: str) -> str | None:
    """Why `dotted` cannot be a profile key (None when it can): SECTION.KEY or a top-level key."""
    if not dotted:
        return "empty key"
    parts = dotted.split(".")
    if "" in parts:
        return "empty part in the key (a leading, trailing or doubled '.')"
    if len(parts) > 2:
        return "too many dots: keys are SECTION.KEY (e.g. loader.batch_size) or a top-level key (e.g. name)"
    for part in parts:
        if not _KEY_PART.fullmatch(part):
            return f"{shown_value(part)} is not a key name (letters, digits and '_' only)"
    return None


def _parse_value(raw: str, where: str, example: str) -> Any:
    """A --set or env value, read as YAML with the same bounds as a file; broken YAML is an error."""
    if not raw.strip():
        return None
    try:
        return parse_yaml(raw, where)
    except UserError as exc:
        problem = exc.problems[0]
        raise UserError([Problem(where, problem.message.replace("broken YAML", "value is not valid YAML"),
                                 f"quote it as a YAML string, e.g. {example}", raw)]) from None


def parse_set(items: list[str]) -> Layer:
    """`--set loader.batch_size=384` items; values are parsed as YAML (384 -> int, true -> bool, null -> None)."""
    data: dict[str, Any] = {}
    problems = Problems()
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        where = f"--set {clip(item, 60)}"
        if not sep:
            problems.add(where, "expected KEY=VALUE (no '=')", "e.g. --set loader.batch_size=384")
            continue
        why = _check_key(key)
        if why:
            problems.add(where, why, "e.g. --set loader.batch_size=384")
            continue
        try:
            value = _parse_value(raw, where, f"--set '{key}=\"...\"'")
        except UserError as exc:
            problems.items += exc.problems
            continue
        _set_dotted(data, key, value)
    if problems.errors:
        raise UserError(problems.items)
    return Layer("--set", data)


def env_layers(env: Mapping[str, str]) -> list[Layer]:
    """FASTTRAIN_LOADER__BATCH_SIZE=384 -> loader.batch_size. Variables without '__' are not profile keys."""
    layers = []
    problems = Problems()
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or "__" not in name:
            continue
        dotted = name[len(ENV_PREFIX):].lower().replace("__", ".")
        why = _check_key(dotted)
        if why:
            problems.add(f"env {clip(name, 60)}", f"not a profile key: {why}",
                         "name it FASTTRAIN_SECTION__KEY, e.g. FASTTRAIN_LOADER__BATCH_SIZE, or unset it")
            continue
        try:
            value = _parse_value(env[name], f"env {name}", f"{name}='\"...\"'")
        except UserError as exc:
            problems.items += exc.problems
            continue
        data: dict[str, Any] = {}
        _set_dotted(data, dotted, value)
        layers.append(Layer(f"env {name}", data))
    if problems.errors:
        raise UserError(problems.items)
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
        hint = did_you_mean(str(value), choices) if isinstance(value, str) else ""
        return Problem(where, f"unknown name {shown_value(value)}", f"{hint + ' ' if hint else ''}choose one of {allowed}")
    msg = err["msg"]
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return Problem(where, msg.lower(), "change the value", value)
    fix = _FIXES.get(kind, "")
    if kind == "missing" and len(loc) > 2 and loc[0] in SECTIONS:  # an item of a [min, max] pair
        return Problem(where, "too few items", _FIXES["too_short"], value)
    if kind == "bad_range":
        fix = err.get("ctx", {}).get("fix", "")
    if kind == "string_pattern_mismatch":
        if "x00" in str(err.get("ctx", {}).get("pattern", "")):
            return Problem(where, "contains control characters (NUL, escape, ...)", "remove them", value)
    return Problem(where, msg[0].lower() + msg[1:], fix, value if kind != "missing" else None)


_FIXES = {
    "finite_number": "use a finite number (not .inf or .nan)",
    "string_too_long": "shorten it",
    "string_too_short": "give a non-empty name, or remove the key",
    "string_pattern_mismatch": "write it as MAJOR.MINOR in quotes, e.g. \"8.6\"",
    "int_from_float": "use a whole number",
    "tuple_type": "give a list of two numbers, e.g. [0.08, 1.0]",
    "too_long": "give exactly two numbers, e.g. [0.08, 1.0]",
    "too_short": "give exactly two numbers, e.g. [0.08, 1.0]",
}


def build(layers: list[Layer], what_if: bool = False) -> Resolved:
    """Merge layers (lowest precedence first), validate everything, and report all problems at once.
    what_if (estimate): an over-budget loader RAM is a note to forecast, not an error (rules.check_cross_fields)."""
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
        errors = exc.errors()
        for err in errors[:MAX_PROBLEMS]:  # did-you-mean per problem is not free: 500,000 unknown keys took 53 s
            problems.items.append(_problem_from_pydantic(err, provenance))
        if len(errors) > MAX_PROBLEMS:
            problems.add("", f"... and {len(errors) - MAX_PROBLEMS:,} more problem(s) like these",
                         "fix the ones above first")
    check_cross_fields(merged, problems, what_if=what_if)
    if problems.errors or profile is None:
        raise UserError(problems.items)
    return Resolved(profile, provenance, problems.notes, [layer.label for layer in layers], list(layers))


def resolve(ref: str, sets: list[str] | None = None, env: Mapping[str, str] | None = None,
            flags: Mapping[str, Any] | None = None, what_if: bool = False) -> Resolved:
    """Profile `ref` (preset name or file) + env + --set + explicit flags, validated."""
    layers = _file_layers(_check_ref(ref, "--profile"))
    layers += env_layers(os.environ if env is None else env)
    if sets:
        layers.append(parse_set(sets))
    return build(layers + flag_layers(flags or {}), what_if=what_if)


def flag_layers(flags: Mapping[str, tuple[str, Any]]) -> list[Layer]:
    """One layer per flag ({dotted key: (flag, value)}), labelled "flag <flag>" for `profiles show`."""
    layers = []
    for dotted, (flag, value) in flags.items():
        data: dict[str, Any] = {}
        _set_dotted(data, dotted, value)
        layers.append(Layer(f"flag {flag}", data))
    return layers


def resolve_file_only(ref: str) -> Resolved:
    """A file exactly as written (with its parents), no env or flags: what `profiles validate` checks."""
    return build(_file_layers(_check_ref(ref, "profile")))
