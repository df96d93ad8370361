"""Generated hostile command-line input (Hypothesis): exit 0 or 2 (doctor: 1 too), never a traceback,
bounded output, bounded time.

Values: empty, whitespace, NUL and other control characters, unicode, huge and negative numbers, nan/inf,
paths that do not exist, files and directories of the wrong kind, `a:b:c`, `:`, `mod:`. They go through
`estimate` (tiny model priced on the meta device for the T4 of the kaggle-t4 preset: no CPU measurement),
`train --dry-run` (no training), `bench compare` and `doctor --report-from` (a recorded CPU report).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from conftest import FIXTURES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

MAX_OUTPUT = 20_000   # characters of stdout + stderr for one rejected or accepted command
MAX_SECONDS = 30      # per command: nothing here trains or measures

def _settings(examples: int) -> settings:
    # derandomize: the same examples on every run and machine (a CI failure reproduces), no example database.
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


SETTINGS = _settings(40)

# Safe by construction: no `module:callable` here names a function that does something when called with no
# arguments (random text never has a colon: a real module's function must never be called by a test).
SPECS = ["", " ", "\t", "\n", "\x00", "a\x00b", ":", "mod:", ":fn", "a:b:c", "a:b", "no_such_module_xyz:build",
         "os:sep", "math:pi", "math:floor", "json:loads", ".rel:fn", "a b:c", "é:f", "x" * 300, "tiny_cnn ",
         "resnet", "RESNET18", "--help", "-1", "☃", "../../..", "/", "~"]
NUMBERS = ["0", "-1", "-0", "1", "2", "7", "31", "33", "64", "8192", "8193", "100000", str(2**31), str(2**32),
           str(2**63), str(2**70), str(-(2**70)), "1e3", "1.5", "nan", "inf", "-inf", "0x10", "١٢", "auto",
           "", " ", "\x00", "1\x00"]


def text_without_colon() -> st.SearchStrategy[str]:
    return st.text(st.characters(blacklist_characters=":", blacklist_categories=("Cs",)), max_size=24)


def hostile_value(paths: list[str]) -> st.SearchStrategy[str]:
    """Mostly the known-hostile lists (where the bugs were), then generated numbers and text."""
    return st.one_of(st.sampled_from(SPECS), st.sampled_from(NUMBERS), st.sampled_from(NUMBERS),
                     st.sampled_from(paths), st.integers(-(2**80), 2**80).map(str),
                     st.floats(allow_nan=True, allow_infinity=True).map(str), text_without_colon())


BLANK = st.text(st.sampled_from(" \t\n\r\x0b\x0c\u00a0\u2003\u3000"), max_size=4)


@pytest.fixture
def odd_paths(tmp_path: Path) -> list[str]:
    """Paths of the wrong kind: missing, a file, an empty directory, a directory of junk, a symlink loop."""
    (tmp_path / "a_file.txt").write_text("not data")
    (tmp_path / "empty_dir").mkdir()
    junk = tmp_path / "junk_dir" / "cls"
    junk.mkdir(parents=True)
    (junk / "x.png").write_bytes(b"\x89PNG not really")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    return [str(tmp_path / "missing"), str(tmp_path / "a_file.txt"), str(tmp_path / "empty_dir"),
            str(tmp_path / "junk_dir"), str(tmp_path / "loop"), str(tmp_path / "missing" / "deeper"), "/dev/null"]


def _check(cli, args: list[str], allowed: set[int] = frozenset({0, 2})):
    start = time.monotonic()
    r = cli(*args)
    took = time.monotonic() - start
    shown = repr(args)[:300]
    assert r.code in allowed, (shown, r.code, r.err[-2000:])
    assert "Traceback" not in r.out + r.err, (shown, r.err[-2000:])
    assert len(r.out) + len(r.err) < MAX_OUTPUT, (shown, len(r.out), len(r.err))
    assert took < MAX_SECONDS, (shown, took)
    if r.code == 2:  # a reason is given, on stderr
        assert r.err.strip(), shown
    return r


ESTIMATE_FLAGS = ["--model", "--gpu", "--image-size", "--batch-size", "--num-classes", "--dataset-size", "--epochs",
                  "--data"]


@_settings(100)
@given(data=st.data())
def test_estimate_survives_hostile_flags(cli, odd_paths: list[str], data: st.DataObject) -> None:
    args = {"--model": "tiny_cnn", "--profile": "kaggle-t4", "--dataset-size": "1000"}
    for flag in data.draw(st.lists(st.sampled_from(ESTIMATE_FLAGS), min_size=1, max_size=2, unique=True)):
        args[flag] = data.draw(hostile_value(odd_paths), label=flag)
    if "--data" in args:
        args.pop("--dataset-size", None)
    _check(cli, ["estimate", *[x for kv in args.items() for x in kv], "--json"])


TRAIN_FLAGS = ["--data", "--model", "--image-size", "--batch-size", "--num-classes", "--seed", "--epochs",
               "--save-every-minutes", "--save-every", "--on-nan", "--set"]


@_settings(150)
@given(data=st.data())
def test_train_dry_run_survives_hostile_flags(cli, odd_paths: list[str], data: st.DataObject) -> None:
    args = {"--data": "synthetic", "--model": "tiny_cnn"}
    for flag in data.draw(st.lists(st.sampled_from(TRAIN_FLAGS), min_size=1, max_size=2, unique=True)):
        args[flag] = data.draw(hostile_value(odd_paths), label=flag)
    _check(cli, ["train", "--dry-run", "--json", *[x for kv in args.items() for x in kv]])


JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=12),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4), max_leaves=12)
ROW_KEYS = ["setting", "status", "images_per_s", "speedup", "workers", "prefetch", "ram_bytes"]
RESULTS = st.one_of(
    JSON,
    st.fixed_dictionaries({"kind": st.sampled_from(["speedups", "loader", "batch", "x", None, 3])},
                          optional={"machine": JSON, "created_at": JSON, "batch": JSON, "search": JSON,
                                    "rows": st.lists(st.dictionaries(st.sampled_from(ROW_KEYS), JSON), max_size=3),
                                    "points": st.lists(st.dictionaries(st.sampled_from(ROW_KEYS), JSON),
                                                       max_size=3)}),
)


@SETTINGS
@given(a=RESULTS, b=st.one_of(RESULTS, st.binary(max_size=64)), as_json=st.booleans())
def test_bench_compare_survives_hostile_files(cli, tmp_path: Path, a: object, b: object, as_json: bool) -> None:
    fa, fb = tmp_path / "a.json", tmp_path / "b.json"
    fa.write_text(json.dumps(a, allow_nan=True))
    if isinstance(b, bytes):
        fb.write_bytes(b)
    else:
        fb.write_text(json.dumps(b, allow_nan=True))
    _check(cli, ["bench", "compare", str(fa), str(fb), *(["--json"] if as_json else [])])


@SETTINGS
@given(data=st.data())
def test_bench_compare_survives_hostile_paths(cli, odd_paths: list[str], data: st.DataObject) -> None:
    a = data.draw(st.one_of(st.sampled_from(odd_paths), st.sampled_from(SPECS), text_without_colon()))
    _check(cli, ["bench", "compare", a, odd_paths[0]])


DOCTOR_FLAGS = ["--profile", "--data", "--target-images-per-s", "--report-from"]


@SETTINGS
@given(data=st.data())
def test_doctor_survives_hostile_flags(cli, odd_paths: list[str], data: st.DataObject) -> None:
    args = {"--report-from": str(FIXTURES / "reports" / "cpu_only.json")}
    flag = data.draw(st.sampled_from(DOCTOR_FLAGS))
    args[flag] = data.draw(hostile_value(odd_paths), label=flag)
    _check(cli, ["doctor", *[x for kv in args.items() for x in kv]], allowed={0, 1, 2})


@SETTINGS
@given(value=BLANK, where=st.sampled_from(["train --model", "train --data", "estimate --model", "estimate --gpu"]))
def test_empty_or_blank_names_are_always_exit_2(cli, value: str, where: str) -> None:
    command, flag = where.split()
    base = ["train", "--dry-run", "--data", "synthetic"] if command == "train" else \
        ["estimate", "--model", "tiny_cnn", "--profile", "kaggle-t4", "--dataset-size", "1000"]
    r = _check(cli, [*base, flag, value])
    assert r.code == 2 and f"{flag}:" in r.err, (where, value, r.err)


@SETTINGS
@given(seed=st.one_of(st.integers(max_value=-1), st.integers(min_value=2**32)))
def test_seeds_the_rngs_refuse_are_always_exit_2(cli, seed: int) -> None:
    r = _check(cli, ["train", "--dry-run", "--data", "synthetic", "--seed", str(seed)])
    assert r.code == 2 and "--seed:" in r.err


@SETTINGS
@given(size=st.one_of(st.integers(max_value=0), st.integers(min_value=8193)),
       command=st.sampled_from(["estimate", "train"]))
def test_image_sizes_out_of_range_are_always_exit_2(cli, size: int, command: str) -> None:
    base = ["train", "--dry-run", "--data", "synthetic"] if command == "train" else \
        ["estimate", "--model", "tiny_cnn", "--profile", "kaggle-t4", "--dataset-size", "1000"]
    r = _check(cli, [*base, "--image-size", str(size)])
    assert r.code == 2, r.err


@SETTINGS
@given(n=st.integers(min_value=2**40, max_value=2**90),
       where=st.sampled_from(["train --num-classes", "estimate --num-classes", "estimate --dataset-size",
                              "estimate --epochs"]))
def test_counts_past_any_real_run_are_always_exit_2(cli, n: int, where: str) -> None:
    command, flag = where.split()
    base = ["train", "--dry-run", "--data", "synthetic"] if command == "train" else \
        ["estimate", "--model", "tiny_cnn", "--profile", "kaggle-t4"]
    r = _check(cli, [*base, flag, str(n)])
    assert r.code == 2 and f"{flag}:" in r.err, (where, n, r.err)


REPORTS = ["cpu_only.json", "t4_kaggle.json", "a10g_x4.json", "container_shm64.json", "rtx4060_laptop.json"]
ODD_NUMBERS = [0, -1, -(2**40), 2**70, 0.0, -0.5, 1e-300, float("nan"), float("inf"), float("-inf"), None, "",
               "0", True, [], {}]


def _numeric_paths(node: object, path: tuple = ()) -> list[tuple]:
    """Every path to a number (int or float, not bool) in a report's JSON."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _numeric_paths(v, (*path, k))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _numeric_paths(v, (*path, i))]
    return [path] if isinstance(node, (int, float)) and not isinstance(node, bool) else []


@_settings(60)
@given(data=st.data())
def test_doctor_survives_reports_with_odd_counts(cli, tmp_path: Path, data: st.DataObject) -> None:
    """Issue 43: a recorded report whose CPU had zero cores ended in ZeroDivisionError. Any number of a real
    report set to zero, a negative, a huge value, nan/inf, null, a string, or removed: exit 0, 1 or 2 with a
    reason, never a traceback (hardware/report.py's field types are the one guard)."""
    name = data.draw(st.sampled_from(REPORTS), label="report")
    report = json.loads((FIXTURES / "reports" / name).read_text())
    numbers = _numeric_paths(report)
    if data.draw(st.booleans(), label="a whole section"):  # e.g. every count of the CPU zero at once
        section = data.draw(st.sampled_from(sorted({p[:-1] for p in numbers}, key=str)), label="section")
        paths = [p for p in numbers if p[:-1] == section]
    else:
        paths = data.draw(st.lists(st.sampled_from(numbers), min_size=1, max_size=3, unique=True), label="paths")
    odd = data.draw(st.sampled_from(ODD_NUMBERS), label="value")
    for path in paths:
        *parents, leaf = path
        node = report
        for key in parents:
            node = node[key]
        if data.draw(st.booleans(), label="remove") and isinstance(node, dict):
            del node[leaf]
        else:
            node[leaf] = odd
    file = tmp_path / "odd.json"
    file.write_text(json.dumps(report, allow_nan=True))
    _check(cli, ["doctor", "--report-from", str(file)], allowed={0, 1, 2})


@pytest.mark.parametrize("field", ["logical_cores", "usable_cores", "physical_cores"])
def test_a_report_of_a_cpu_with_zero_cores_is_refused_with_the_field(cli, tmp_path: Path, field: str) -> None:
    report = json.loads((FIXTURES / "reports" / "cpu_only.json").read_text())
    report["cpu"][field] = 0
    file = tmp_path / "zero.json"
    file.write_text(json.dumps(report))
    r = _check(cli, ["doctor", "--report-from", str(file)])
    assert r.code == 2 and f"cpu.{field}" in r.err and "greater than or equal to 1" in r.err, r.err


def test_doctor_survives_every_section_of_a_report_zero_negative_nan_or_missing(cli, tmp_path: Path) -> None:
    """The sweep the generated test samples from: every section of every recorded report with all its numbers
    zero, negative, nan or null at once (a CPU with zero cores, a GPU with no memory, a disk read in no time)."""
    file = tmp_path / "odd.json"
    for name in REPORTS:
        original = (FIXTURES / "reports" / name).read_text()
        for section in sorted({p[:-1] for p in _numeric_paths(json.loads(original))}, key=str):
            for odd in (0, -1, float("nan"), None):
                report = json.loads(original)
                for *parents, leaf in (p for p in _numeric_paths(report) if p[:-1] == section):
                    node = report
                    for key in parents:
                        node = node[key]
                    node[leaf] = odd
                file.write_text(json.dumps(report, allow_nan=True))
                _check(cli, ["doctor", "--report-from", str(file)], allowed={0, 1, 2})
