"""Resolve a profile: layer its sources, merge them, validate the result, and remember where every value came from.

Precedence (docs/profiles.md): CLI flag > --set > env FASTTRAIN_* > profile file > extends parent > defaults.
The sources are read by profiles/files.py (presets, YAML files and their `extends:` chain) and
profiles/overrides.py (--set, FASTTRAIN_* variables); pydantic's errors become Problems in profiles/problems.py.
Nothing here imports torch: `fasttrain profiles ...` must answer in well under a second.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from fasttrain.core.errors import Problem, Problems, UserError
from fasttrain.profiles import files, overrides
from fasttrain.profiles.problems import problem_from_pydantic
from fasttrain.profiles.rules import check_cross_fields
from fasttrain.profiles.schema import SECTIONS, Profile, all_dotted_keys

# Bounds on the work one profile may cause: a profile is a few dozen keys, three levels deep, a few KiB.
MAX_PROBLEMS = 20                  # problems listed per resolution, then "... and N more"


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


def file_layers(ref: str, where: str) -> list[Layer]:
    """Profile `ref` (preset name or file, as written in `where`) and its `extends` chain, base first."""
    return [Layer(label, data) for label, data in files.read_chain(files.check_ref(ref, where))]


def parse_set(items: list[str]) -> Layer:
    """`--set loader.batch_size=384` items; values are parsed as YAML (384 -> int, true -> bool, null -> None)."""
    return Layer("--set", overrides.set_values(items))


def env_layers(env: Mapping[str, str]) -> list[Layer]:
    """FASTTRAIN_LOADER__BATCH_SIZE=384 -> loader.batch_size. Variables without '__' are not profile keys."""
    return [Layer(label, data) for label, data in overrides.env_values(env)]


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


def build(layers: list[Layer], what_if: bool = False) -> Resolved:
    """Merge layers (lowest precedence first), validate everything, and report all problems at once.
    what_if (estimate): an over-budget loader RAM is a note to forecast, not an error (rules.check_cross_fields)."""
    merged: dict[str, Any] = {}
    provenance: dict[str, str] = dict.fromkeys(all_dotted_keys(), "default")
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
            problems.items.append(problem_from_pydantic(err, provenance))
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
    layers = file_layers(ref, "--profile")
    layers += env_layers(os.environ if env is None else env)
    if sets:
        layers.append(parse_set(sets))
    return build(layers + flag_layers(flags or {}), what_if=what_if)


def flag_layers(flags: Mapping[str, tuple[str, Any]]) -> list[Layer]:
    """One layer per flag ({dotted key: (flag, value)}), labelled "flag <flag>" for `profiles show`."""
    layers = []
    for dotted, (flag, value) in flags.items():
        data: dict[str, Any] = {}
        overrides.set_dotted(data, dotted, value)
        layers.append(Layer(f"flag {flag}", data))
    return layers


def resolve_file_only(ref: str) -> Resolved:
    """A file exactly as written (with its parents), no env or flags: what `profiles validate` checks."""
    return build(file_layers(ref, "profile"))
