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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES

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


def _check(cli, args: list[str], allowed: set[int] = frozenset({0, 2})):  # noqa: ANN001 - the cli fixture
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
