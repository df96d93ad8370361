"""Hostile profile input: every command that reads a profile answers 0 or 2 (doctor: 1 for a failed finding),
one line per problem, never a traceback, with bounded output and time.

Explicit regression tests for each case found by hand come first; generated input (Hypothesis) follows:
random bytes, YAML-ish text, random nested structures with known and unknown keys, extreme numbers,
strings with NUL and unicode, alias bombs, hostile --set items and FASTTRAIN_* variables.
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest
import yaml
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fasttrain.profiles.files import preset_names
from fasttrain.profiles.schema import SECTIONS, all_dotted_keys

CPU_REPORT = str(FIXTURES / "reports" / "cpu_only.json")
MAX_OUTPUT = 64 * 1024       # bytes of stdout + stderr one run may print
MAX_SECONDS = 15.0           # one in-process run (the first train/estimate imports torch)

COMMANDS = {
    "validate": lambda f: ["profiles", "validate", f],
    "show": lambda f: ["profiles", "show", f],
    "train": lambda f: ["train", "--dry-run", "--profile", f, "--model", "tiny_cnn", "--data", "synthetic"],
    "estimate": lambda f: ["estimate", "--profile", f, "--model", "tiny_cnn", "--image-size", "32",
                           "--dataset-size", "1000"],
    "doctor": lambda f: ["doctor", "--profile", f, "--report-from", CPU_REPORT],
}
ALLOWED = {"doctor": {0, 1, 2}}


def check_run(cli, command: str, argv: list[str]):
    """Run one command; assert the project's promises about exit code, traceback, output size and time."""
    start = time.monotonic()
    result = cli(*argv)
    took = time.monotonic() - start
    output = result.out + result.err
    assert result.code in ALLOWED.get(command, {0, 2}), (argv, result.code, output[-2000:])
    assert "Traceback" not in output, output[-4000:]
    assert len(output.encode("utf-8", "replace")) < MAX_OUTPUT, (argv, len(output))
    assert took < MAX_SECONDS, (argv, took)
    if result.code == 2:
        assert "error:" in result.err, (argv, output[-2000:])
    return result


def error_lines(result) -> list[str]:
    return [line for line in result.err.splitlines() if "error:" in line]


def write(tmp_path: Path, content: bytes | str, name: str = "p.yaml") -> str:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    return str(path)


def alias_bomb(width: int = 9, depth: int = 9) -> str:
    text = "a0: &a0 [" + ", ".join(['"lol"'] * width) + "]\n"
    for i in range(1, depth):
        text += f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]\n"
    return text


# ---- 1. not UTF-8 ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("content", [b"loader:\n  batch_size: 64\ndescription: caf\xe9\n",
                                     bytes(range(256)) * 4], ids=["latin1", "binary"])
def test_not_utf8_is_exit_2_on_every_command(cli, tmp_path, command, content):
    f = write(tmp_path, content)
    result = check_run(cli, command, COMMANDS[command](f))
    assert result.code == 2
    assert "not UTF-8 text" in result.err


def test_not_utf8_names_the_byte(cli, tmp_path):
    f = write(tmp_path, b"name: caf\xe9\n")
    result = cli("profiles", "validate", f)
    assert f"{f}: not UTF-8 text (byte 0xe9 at offset 9)" in result.err


def test_utf8_bom_is_fine(cli, tmp_path):
    f = write(tmp_path, "\ufeffloader:\n  batch_size: 64\n")
    assert cli("profiles", "validate", f).code == 0


# ---- 2. bounded work ------------------------------------------------------------------------------------

@pytest.mark.parametrize("content", ["[" * 100_000, "a:\n" + "".join(" " * i + "a:\n" for i in range(1, 1000)),
                                     "{a: " * 3000 + "1" + "}" * 3000], ids=["brackets", "mappings", "flow"])
def test_deep_nesting_is_exit_2(cli, tmp_path, content):
    f = write(tmp_path, content)
    for command in ("validate", "show", "train"):
        result = check_run(cli, command, COMMANDS[command](f))
        assert result.code == 2
        assert "nested deeper than 32 levels" in result.err


def test_file_over_1_mib_is_refused_unread(cli, tmp_path):
    f = write(tmp_path, "".join(f"k{i}: {i}\n" for i in range(500_000)))
    start = time.monotonic()
    result = check_run(cli, "validate", COMMANDS["validate"](f))
    assert time.monotonic() - start < 3
    assert result.code == 2
    assert "larger than 1,048,576 bytes (1 MiB)" in result.err


def test_many_unknown_keys_list_20_then_a_count(cli, tmp_path):
    f = write(tmp_path, "".join(f"k{i}: {i}\n" for i in range(3_000)))
    result = check_run(cli, "validate", COMMANDS["validate"](f))
    lines = error_lines(result)
    assert result.code == 2
    assert len(lines) == 1 + 20 + 1, lines[:3]  # title, 20 problems, the count
    assert lines[-1].endswith("... and 2,980 more problem(s) like these; fix the ones above first")


def test_too_many_values_stop_early(cli, tmp_path):
    f = write(tmp_path, "".join(f"k{i}: {i}\n" for i in range(60_000)))  # under 1 MiB, over 10,000 values
    start = time.monotonic()
    result = check_run(cli, "validate", COMMANDS["validate"](f))
    assert time.monotonic() - start < 3
    assert "more than 10,000 values" in result.err


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_alias_bomb_fails_fast(cli, tmp_path, command):
    f = write(tmp_path, alias_bomb())
    start = time.monotonic()
    result = check_run(cli, command, COMMANDS[command](f))
    assert time.monotonic() - start < 3
    assert result.code == 2
    assert "more than 10,000 values once aliases are expanded" in result.err
    assert len(result.err) < 2000


def test_small_anchors_still_work(cli, tmp_path):
    f = write(tmp_path, "loader: &l\n  batch_size: 64\n  num_workers: 1\n"
                        "description: &d shared\nname: *d\n")
    assert cli("profiles", "validate", f).code == 0


def test_self_referencing_alias(cli, tmp_path):
    f = write(tmp_path, "loader: &a\n  batch_size: [*a]\n")
    result = check_run(cli, "validate", COMMANDS["validate"](f))
    assert result.code == 2 and "an alias refers to its own anchor" in result.err


@pytest.mark.parametrize("content, message", [
    ("name: 2024-13-45\n", "cannot read this value (month must be in 1..12)"),
    ("loader:\n  batch_size: " + "9" * 10_000 + "\n", "cannot read this value (Exceeds the limit"),
    ("name: a\x01b\n", "p.yaml:1:8: broken YAML: control character #x0001 is not allowed"),
    ("name: a\n\x00b\n", "p.yaml:2:1: broken YAML: control character #x0000 is not allowed"),
    ("name: !!int\n", "cannot read this value"),
    ("name: !!binary 'a'\n", "broken YAML: failed to decode base64"),
    ("name: !!float\n", "cannot read this value"),
    ("name: !!timestamp 2024-02-30\n", "cannot read this value"),
])
def test_unreadable_values_are_broken_yaml(cli, tmp_path, content, message):
    f = write(tmp_path, content)
    result = check_run(cli, "validate", COMMANDS["validate"](f))
    assert result.code == 2 and message in result.err, result.err


def test_long_values_are_clipped_in_messages(cli, tmp_path):
    f = write(tmp_path, "name: " + "x" * 100_000 + "\nloader:\n  " + "y" * 1000 + ": 1\n"
              + "speed:\n  precision: " + "z" * 100_000 + "\n")
    result = check_run(cli, "validate", COMMANDS["validate"](f))
    assert result.code == 2
    assert "string should have at most 100 characters" in result.err
    assert "yyyyyyyy...: unknown key" in result.err
    assert "speed.precision: unknown name 'zzzz" in result.err
    assert all(len(line) < 700 for line in result.err.splitlines())


def test_huge_int_is_out_of_range_not_a_crash(cli, tmp_path):
    f = write(tmp_path, "loader:\n  batch_size: " + "9" * 4000 + "\nhardware:\n  host_ram_gb: .nan\n")
    result = check_run(cli, "validate", COMMANDS["validate"](f))
    assert result.code == 2
    assert "loader.batch_size: input should be less than or equal to 1048576" in result.err
    assert "hardware.host_ram_gb: input should be a finite number (got nan)" in result.err


# ---- 3. junk in extends ---------------------------------------------------------------------------------

@pytest.mark.parametrize("extends, message", [
    ('"a\\0b"', "extends: contains a NUL byte"),
    ('"a\\0b.yaml"', "extends: contains a NUL byte"),
    ('"' + "x" * 5000 + '.yaml"', "extends: is 5,005 characters long"),
    ('"' + "x/" * 300 + 'y.yaml"', "no such profile file"),
    ('"' + "x" * 1000 + '.yaml"', "cannot"),  # a file name over NAME_MAX: ENAMETOOLONG
    ("[cpu, laptop-4060]", "extends: must be a preset name or a file path, not a list"),
    ("{a: 1}", "extends: must be a preset name or a file path, not a dict"),
    ("12", "extends: must be a preset name or a file path, not a int"),
    ('""', "extends: is empty"),
    ('"."', "is a directory, not a profile file"),
    ("sub", "is a directory, not a profile file"),
])
def test_junk_in_extends_is_exit_2(cli, tmp_path, extends, message):
    (tmp_path / "sub").mkdir()
    f = write(tmp_path, f"extends: {extends}\n")
    for command in ("validate", "show", "train"):
        result = check_run(cli, command, COMMANDS[command](f))
        assert result.code == 2
        assert message in result.err, result.err


@pytest.mark.parametrize("ref, message", [("a\0b", "--profile: contains a NUL byte"),
                                          ("x" * 2000, "--profile: is 2,000 characters long"),
                                          ("", "--profile: is empty")])
def test_junk_profile_argument_is_exit_2(cli, ref, message):
    result = check_run(cli, "show", ["profiles", "show", ref])
    assert result.code == 2 and message in result.err, result.err


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom", "/dev/null"])
def test_devices_are_not_profiles(cli, tmp_path, device):
    result = check_run(cli, "show", ["profiles", "show", device])
    assert result.code == 2 and f"{device}: not a regular file" in result.err
    f = write(tmp_path, f"extends: {device}\n")
    result = check_run(cli, "validate", COMMANDS["validate"](f))
    assert result.code == 2 and f"{device}: not a regular file" in result.err


def test_extends_symlink_loop(cli, tmp_path):
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    f = write(tmp_path, "extends: loop.yaml\n")
    result = check_run(cli, "validate", COMMANDS["validate"](f))
    assert result.code == 2


# ---- 4. the schema: finite, positive, bounded, ordered --------------------------------------------------

@pytest.mark.parametrize("key, value, message", [
    ("augment.random_resized_crop_scale", "[1.0, 0.1]", "min is above max (got [1.0, 0.1])"),
    ("augment.random_resized_crop_scale", "[0, 0]", "both ends must be in (0, 1]"),
    ("augment.random_resized_crop_scale", "[0.5, 1.5]", "both ends must be in (0, 1]"),
    ("augment.random_resized_crop_scale", "[0.5]", "too few items"),
    ("augment.random_resized_crop_scale", "[.nan, 1]", "finite number"),
    ("optim.base_lr", ".inf", "input should be a finite number (got inf)"),
    ("optim.base_lr", ".nan", "input should be a finite number (got nan)"),
    ("optim.base_lr", "-0.1", "greater than 0"),
    ("optim.base_lr", "0", "greater than 0"),
    ("optim.weight_decay", "-1", "greater than or equal to 0"),
    ("optim.clip_grad_norm", ".inf", "finite number"),
    ("optim.epochs", "0", "greater than 0"),
    ("optim.epochs", "1000000000", "less than or equal to 100000"),
    ("optim.warmup_epochs", ".inf", "finite number"),
    ("loader.batch_size", "-1", "greater than 0"),
    ("loader.batch_size", "10000000000", "less than or equal to 1048576"),
    ("loader.num_workers", "-1", "greater than or equal to 0"),
    ("loader.image_size", "1000000", "less than or equal to 16384"),
    ("loader.batch_overhead", ".inf", "finite number"),
    ("hardware.host_ram_gb", "1.0e+300", "less than or equal to 65536"),
    ("hardware.vram_gb", "-2", "greater than 0"),
    ("hardware.price_spot_per_hour", ".nan", "finite number"),
    ("hardware.compute_capability", '"8.6.1"', "MAJOR.MINOR"),
    ("world.nodes", "0", "greater than 0"),
    ("world.gpus_per_node", "100000", "less than or equal to 1024"),
    ("augment.color_jitter", ".inf", "finite number"),
])
def test_schema_refuses(cli, tmp_path, key, value, message):
    section, field = key.split(".")
    f = write(tmp_path, f"extends: cpu\n{section}:\n  {field}: {value}\n")
    result = check_run(cli, "validate", COMMANDS["validate"](f))
    assert result.code == 2, result.out
    line = next(line for line in error_lines(result) if key in line)
    assert message in line, line
    result = check_run(cli, "train", COMMANDS["train"](f))
    assert result.code == 2


@pytest.mark.parametrize("key, value", [("name", '"a\\e[31mred"'), ("name", '"a\\0b"'),
                                        ("hardware.gpu", '"A10G\\0"'), ("description", '"bell\\a"')])
def test_control_characters_in_names(cli, tmp_path, key, value):
    text = f"{key}: {value}\n" if "." not in key else f"{key.split('.')[0]}:\n  {key.split('.')[1]}: {value}\n"
    f = write(tmp_path, text)
    result = check_run(cli, "validate", COMMANDS["validate"](f))
    assert result.code == 2
    assert f"{key}: contains control characters" in result.err
    assert "\x1b" not in result.err and "\x00" not in result.err and "\x07" not in result.err


def test_every_float_field_refuses_inf_and_nan():
    from fasttrain.profiles.schema import Profile
    floats = [k for k in all_dotted_keys() if "." in k
              and "float" in str(SECTIONS[k.split(".")[0]].model_fields[k.split(".")[1]].annotation)
              and k != "augment.random_resized_crop_scale"]
    assert len(floats) > 10
    for key in floats:
        section, field = key.split(".")
        for bad in (math.inf, -math.inf, math.nan):
            with pytest.raises(ValidationError):
                Profile.model_validate({section: {field: bad}})


# ---- 5. --set and FASTTRAIN_* ---------------------------------------------------------------------------

@pytest.mark.parametrize("item, message", [
    (".=1", "--set .=1: empty part in the key"),
    ("=1", "--set =1: empty key"),
    ("noequals", "--set noequals: expected KEY=VALUE (no '=')"),
    ("a..b=1", "--set a..b=1: empty part in the key"),
    ("loader.batch_size.x=1", "too many dots"),
    ("a b=1", "'a b' is not a key name"),
    ("loader.batch size=1", "'batch size' is not a key name"),
    ("name=[oops", "--set name=[oops: value is not valid YAML"),
    ("name={{", "value is not valid YAML"),
    ("loader.batch_size=" + "9" * 5000, "value is not valid YAML: cannot read this value"),
    ("loader.batch_size=.inf", "loader.batch_size (--set): input should be a finite number (got inf)"),
    ("optim.base_lr=.nan", "optim.base_lr (--set): input should be a finite number (got nan)"),
    ("name=" + alias_bomb().replace("\n", ", ").join("{}"), "more than 10,000 values"),
])
def test_bad_set_items(cli, item, message):
    for command in ("show", "train"):
        argv = ["profiles", "show", "cpu"] if command == "show" else COMMANDS["train"]("cpu")
        result = check_run(cli, command, [*argv, "--set", item])
        assert result.code == 2
        assert message in result.err, result.err
        assert "error:  " not in result.err  # no empty place


@pytest.mark.parametrize("name, value, message", [
    ("FASTTRAIN___", "1", "env FASTTRAIN___: not a profile key: empty part"),
    ("FASTTRAIN_LOADER____BATCH", "1", "not a profile key: empty part"),
    ("FASTTRAIN_LOADER__BATCH_SIZE", "{{", "env FASTTRAIN_LOADER__BATCH_SIZE: value is not valid YAML"),
    ("FASTTRAIN_LOADER__BATCH_SIZE", "-5", "loader.batch_size (env FASTTRAIN_LOADER__BATCH_SIZE): input should be "
                                           "greater than 0"),
    ("FASTTRAIN_OPTIM__BASE_LR", ".inf", "finite number"),
    ("FASTTRAIN_A__B__C", "1", "too many dots"),
    ("FASTTRAIN_LOADER__BATCH-SIZE", "1", "'batch-size' is not a key name"),
    ("FASTTRAIN_NOPE__X", "1", "nope (env FASTTRAIN_NOPE__X): unknown key"),
])
def test_bad_env_variables(cli, monkeypatch, name, value, message):
    monkeypatch.setenv(name, value)
    for argv in (["profiles", "show", "cpu"], COMMANDS["train"]("cpu"), COMMANDS["estimate"]("cpu")):
        result = check_run(cli, argv[0], argv)
        assert result.code == 2
        assert message in result.err, result.err


def test_env_without_double_underscore_is_not_a_profile_key(cli, monkeypatch):
    monkeypatch.setenv("FASTTRAIN_SOMETHING", "{{")
    assert cli("profiles", "show", "cpu").code == 0


# ---- generated hostile input ----------------------------------------------------------------------------

KNOWN_KEYS = [k.split(".")[-1] for k in all_dotted_keys()] + list(SECTIONS) + ["extends", "name"]
HOSTILE_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["", "\x00", "a\x00b", "é", "\U0001f600", "\u202e", "cpu", "../cpu.yaml", "/", ".", "~nobody/x.yaml",
     "*", "&a", "!!python/object:os.system", "x" * 2000])
NUMBERS = (st.integers() | st.integers(min_value=-(10 ** 4200), max_value=10 ** 4200)
           | st.floats(allow_nan=True, allow_infinity=True)
           | st.sampled_from([0, -1, 1, 2 ** 31, 2 ** 63, 2 ** 64 + 1, 1e308, -1e308, 5e-324, 0.0, -0.0]))
SCALARS = st.none() | st.booleans() | NUMBERS | HOSTILE_TEXT
KEYS = st.sampled_from(KNOWN_KEYS) | HOSTILE_TEXT | st.integers(-5, 5) | st.booleans() | st.none()
TREES = st.recursive(SCALARS, lambda children: st.lists(children, max_size=4)
                     | st.dictionaries(KEYS, children, max_size=5), max_leaves=25)


@st.composite
def profile_dicts(draw):
    """A mapping shaped like a profile: known sections with known or unknown keys and hostile values."""
    data: dict = {}
    if draw(st.booleans()):
        data["extends"] = draw(st.sampled_from(preset_names()) | SCALARS)
    for section in draw(st.lists(st.sampled_from(list(SECTIONS)), max_size=3, unique=True)):
        fields = list(SECTIONS[section].model_fields)
        keys = draw(st.lists(st.sampled_from(fields) | HOSTILE_TEXT, max_size=4, unique=True))
        data[section] = {k: draw(SCALARS | TREES) for k in keys}
    if draw(st.booleans()):
        data[draw(KEYS)] = draw(TREES)
    return data


def dump(data) -> str:
    try:
        return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)
    except (ValueError, yaml.YAMLError):  # e.g. an int with no str(): write it by hand
        return "loader:\n  batch_size: " + "9" * 5000 + "\n"


@st.composite
def yamlish_text(draw):
    pieces = st.sampled_from(["\n", "  ", ": ", "- ", "[", "]", "{", "}", ",", "&a ", "*a", "&b ", "*b", "!!str ",
                              "!!int ", "!!float ", "!!binary ", "!!set ", "? ", "|", ">", "'", '"', "#", "%YAML 1.1",
                              "---", "...", "<<: ", "\t", "\\", ".inf", ".nan", "-.inf", "0x", "0o", "1e9", "~",
                              "null", "yes", "2024-13-45", "loader", "batch_size", "optim", "base_lr", "extends",
                              "augment", "random_resized_crop_scale", "\x00", "é", "\ufeff", "\x85", "\u2028"])
    return "".join(draw(st.lists(pieces | HOSTILE_TEXT, max_size=60)))


@st.composite
def bombs(draw):
    width = draw(st.integers(2, 12))
    depth = draw(st.integers(2, 12))
    prefix = draw(st.sampled_from(["", "loader:\n  batch_size: 1\n"]))
    return prefix + alias_bomb(width, depth)


def _edges(section: str, field: str) -> list:
    """Values at and just past the field's own bounds: what a valid-but-extreme profile hands the plan."""
    info = SECTIONS[section].model_fields[field]
    values: list = [None, 0, 1, -1, 0.5, math.inf, math.nan]
    for meta in info.metadata:
        for attr in ("gt", "ge", "lt", "le"):
            bound = getattr(meta, attr, None)
            if bound is not None:
                values += [bound, bound + 1, bound - 1, bound * 2]
                if isinstance(bound, float) or "float" in str(info.annotation):
                    values += [math.nextafter(bound, math.inf), math.nextafter(bound, -math.inf)]
    return values


@st.composite
def edge_profiles(draw):
    """A preset plus a few known keys at the edges of their ranges (many of them valid)."""
    data: dict = {"extends": draw(st.sampled_from(preset_names()))}
    for key in draw(st.lists(st.sampled_from([k for k in all_dotted_keys() if "." in k]), min_size=1, max_size=6)):
        section, field = key.split(".")
        data.setdefault(section, {})[field] = draw(st.sampled_from(_edges(section, field)) | SCALARS)
    return data


HOSTILE_FILES = (st.binary(max_size=2000) | yamlish_text().map(str.encode)
                 | profile_dicts().map(lambda d: dump(d).encode()) | TREES.map(lambda t: dump(t).encode())
                 | bombs().map(str.encode))
# HOSTILE_EXAMPLES=1000 for a longer hunt; 60 keeps this file near 20 s on a 2-core machine.
HYPOTHESIS = settings(
    max_examples=int(os.environ.get("HOSTILE_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@HYPOTHESIS
@given(content=HOSTILE_FILES, command=st.sampled_from(sorted(COMMANDS)))
def test_generated_profile_files(cli, tmp_path, content, command):
    f = write(tmp_path, content, "generated.yaml")
    check_run(cli, "validate", COMMANDS["validate"](f))
    check_run(cli, command, COMMANDS[command](f))


@HYPOTHESIS
@given(data=profile_dicts(), command=st.sampled_from(sorted(COMMANDS)))
def test_generated_profiles_on_top_of_a_preset(cli, tmp_path, data, command):
    """Profile-shaped mappings with hostile keys and values over the cpu preset."""
    data["extends"] = "cpu"
    f = write(tmp_path, dump(data), "generated.yaml")
    check_run(cli, command, COMMANDS[command](f))


@HYPOTHESIS
@given(data=edge_profiles(), command=st.sampled_from(sorted(COMMANDS)))
def test_generated_edge_values(cli, tmp_path, data, command):
    """Valid-but-extreme values: what reaches the plan, the estimate and doctor."""
    f = write(tmp_path, dump(data), "generated.yaml")
    check_run(cli, command, COMMANDS[command](f))


SET_KEYS = st.sampled_from(all_dotted_keys()) | st.text(alphabet=".=_ aZ\x00é-", max_size=12)
SET_VALUES = yamlish_text() | SCALARS.map(lambda v: dump(v).removesuffix("...\n").strip())
SET_ITEMS = st.builds(lambda k, sep, v: f"{k}{sep}{v}", SET_KEYS, st.sampled_from(["=", "", "==", " = "]), SET_VALUES)
ENV_NAMES = st.builds(
    lambda k: "FASTTRAIN_" + k,
    st.sampled_from([k.upper().replace(".", "__") for k in all_dotted_keys()])
    | st.text(alphabet="_AZaz09-.", min_size=1, max_size=14),
)


@HYPOTHESIS
@given(
    items=st.lists(SET_ITEMS, max_size=4),
    env=st.dictionaries(ENV_NAMES, SET_VALUES.filter(lambda v: "\x00" not in v), max_size=3),
    command=st.sampled_from(["show", "train", "estimate", "doctor"]),
)
def test_generated_set_items_and_env(cli, tmp_path, items, env, command):
    base = write(tmp_path, "extends: cpu\n", "base.yaml")
    argv = COMMANDS[command](base)
    for item in items:
        argv += ["--set", item] if command != "doctor" else []
    saved = {k: os.environ.get(k) for k in env}
    try:
        os.environ.update(env)
        check_run(cli, command, argv)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
