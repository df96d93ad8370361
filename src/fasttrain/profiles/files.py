"""Profile files: the shipped presets, reading one YAML file within its bounds, and a file's `extends:` chain.

A preset name or a path (from --profile or `extends:`) is checked, located and read here; every refusal is a
UserError with one clear line. What the files say is merged and validated by profiles/presets.py.
"""
from __future__ import annotations

import os
import stat
from importlib import resources
from pathlib import Path
from typing import Any

from fasttrain.core.errors import Problem, UserError, clip, shown_value
from fasttrain.core.suggest import did_you_mean
from fasttrain.profiles.yaml_reader import MAX_PROFILE_BYTES, parse_yaml

MAX_EXTENDS_DEPTH = 8
MAX_REF_CHARS = 1024               # a preset name or a path in --profile / extends


def preset_dir() -> Path:
    """The shipped presets: inside the package (so a wheel has them); the repository's profiles/ links here."""
    return Path(str(resources.files("fasttrain") / "profiles" / "builtin"))


def preset_names() -> list[str]:
    return sorted(p.stem for p in preset_dir().glob("*.yaml"))


def preset_path(name: str) -> Path:
    return preset_dir() / f"{name}.yaml"


def read_profile_text(path: Path) -> str:
    """The file's text: at most MAX_PROFILE_BYTES, UTF-8, or a UserError saying which of those it is not."""
    try:
        with open(path, "rb") as fh:
            kind = os.fstat(fh.fileno()).st_mode
            if not (stat.S_ISREG(kind) or stat.S_ISFIFO(kind)):  # /dev/zero, a terminal, a socket
                raise UserError([Problem(str(path), "not a regular file", "give a .yaml file")])
            raw = fh.read(MAX_PROFILE_BYTES + 1)
    except FileNotFoundError:
        raise UserError(
            [
                Problem(
                    str(path),
                    "no such profile file",
                    f"give a preset name ({', '.join(preset_names())}) or an existing .yaml path",
                )
            ]
        ) from None
    except IsADirectoryError:
        raise UserError([Problem(str(path), "is a directory, not a profile file", "give a .yaml file")]) from None
    except OSError as exc:
        raise UserError([Problem(str(path), f"cannot read the file: {exc.strerror or exc}")]) from None
    except ValueError as exc:  # embedded null byte
        raise UserError([Problem(str(path), f"not a usable file name ({exc})")]) from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise UserError(
            [
                Problem(
                    str(path),
                    f"larger than {MAX_PROFILE_BYTES:,} bytes (1 MiB), too large for a profile",
                    "a profile is a few dozen keys; check that this is the right file",
                )
            ]
        )
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(
            [
                Problem(
                    str(path),
                    f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start:,})",
                    "save the file as UTF-8; a profile is a YAML text file",
                )
            ]
        ) from None


def load_yaml(path: Path) -> dict[str, Any]:
    """Parse one profile file; a syntax error names the line and column."""
    data = parse_yaml(read_profile_text(path), str(path))
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(
            [
                Problem(
                    str(path),
                    f"a profile must be a mapping of sections, not a {type(data).__name__}",
                    "start with keys such as 'loader:' and 'speed:'",
                )
            ]
        )
    return data


def check_ref(ref: object, where: str) -> str:
    """A preset name or a path as written in --profile or `extends:`; junk gets one clear line."""
    fix = f"give a preset name ({', '.join(preset_names())}) or a path to a .yaml file"
    if not isinstance(ref, str):
        raise UserError([Problem(where, f"must be a preset name or a file path, not a {type(ref).__name__}", fix, ref)])
    if not ref.strip():
        raise UserError([Problem(where, "is empty", fix)])
    if "\0" in ref:
        raise UserError([Problem(where, "contains a NUL byte, which no file name can", fix, ref)])
    if len(ref) > MAX_REF_CHARS:
        raise UserError(
            [
                Problem(
                    where,
                    f"is {len(ref):,} characters long, more than a path can be ({MAX_REF_CHARS:,} at most here)",
                    fix,
                    ref,
                )
            ]
        )
    return ref


def locate(ref: str, relative_to: Path | None = None) -> tuple[Path, bool]:
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
        raise UserError(
            [
                Problem(
                    "profile",
                    f"cannot use {ref!r} as a path ({clip(str(exc), 80)})",
                    "give a preset name or an existing .yaml path",
                )
            ]
        ) from None
    hint = did_you_mean(ref, preset_names())
    raise UserError(
        [
            Problem(
                "profile",
                f"no preset or file named {shown_value(ref)}",
                hint or f"presets: {', '.join(preset_names())}",
            )
        ]
    )


def read_chain(
    ref: str, relative_to: Path | None = None, depth: int = 0, seen: tuple[Path, ...] = ()
) -> list[tuple[str, dict[str, Any]]]:
    """The file and its `extends` chain as (label for `profiles show`, values) pairs, base first."""
    path, is_preset = locate(ref, relative_to)
    try:
        resolved = path.resolve()
    except (OSError, ValueError, RuntimeError) as exc:  # a symlink loop, a name too long
        raise UserError([Problem(str(path), f"cannot resolve this path ({clip(str(exc), 80)})")]) from None
    if resolved in seen:
        raise UserError([Problem(str(path), "extends forms a cycle", "one of the files must not extend the other")])
    if depth > MAX_EXTENDS_DEPTH:
        raise UserError([Problem(str(path), f"extends chain deeper than {MAX_EXTENDS_DEPTH}")])
    data = load_yaml(path)
    if is_preset:
        data.setdefault("name", path.stem)
    parent = data.get("extends")
    chain: list[tuple[str, dict[str, Any]]] = []
    if parent is not None:
        parent = check_ref(parent, f"{path}: extends")
        chain = [
            (label if label.startswith("parent ") else f"parent {label.split(' ', 1)[1]}", values)
            for label, values in read_chain(parent, path.parent, depth + 1, (*seen, resolved))
        ]
    label = f"preset {path.stem}" if is_preset else f"file {path}"
    chain.append((label, data))
    return chain
