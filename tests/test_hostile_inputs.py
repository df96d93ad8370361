"""Hostile command-line input: every case is exit 2 with a one-line reason, never a traceback (docs/reliability.md).

Real user modules are written to tmp_path and put on sys.path; real tiny models; real files for the cache and
for `bench compare`. The CLI runs in-process through fasttrain.cli.main (the `cli` fixture).
"""
from __future__ import annotations

import itertools
import json
import math
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import one_error_line

from fasttrain.core.errors import UserError

_names = itertools.count()


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """write(source) -> a fresh importable module name holding `source`."""
    made: list[str] = []
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source: str) -> str:
        name = f"hostile_mod_{next(_names)}"
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
        made.append(name)
        return name

    yield write
    for name in made:
        sys.modules.pop(name, None)


# -- 1. a module that fails on import ---------------------------------------------------------------------------
IMPORT_FAILURES = {
    "RuntimeError": ("raise RuntimeError('boom at import')\n", "RuntimeError: boom at import"),
    "ZeroDivisionError": ("x = 1 / 0\n", "ZeroDivisionError: division by zero"),
    "SyntaxError": ("def (:\n", "SyntaxError"),
    "sys.exit(3)": ("import sys\nsys.exit(3)\n", "SystemExit(3)"),
}


@pytest.mark.parametrize("flag", ["--data", "--model"])
@pytest.mark.parametrize("case", list(IMPORT_FAILURES))
def test_module_that_fails_on_import_is_exit_2(cli, user_module, flag: str, case: str) -> None:
    source, shown = IMPORT_FAILURES[case]
    mod = user_module(source)
    args = ["--data", f"{mod}:build", "--model", "tiny_cnn"] if flag == "--data" else \
        ["--data", "synthetic", "--model", f"{mod}:build"]
    line = one_error_line(cli("train", "--dry-run", *args), flag, repr(mod), shown)
    assert line.startswith(f"fasttrain: error: {flag}: importing module")


def test_estimate_with_a_model_module_that_exits(cli, user_module) -> None:
    mod = user_module("import sys\nsys.exit(3)\n")
    one_error_line(cli("estimate", "--model", f"{mod}:build", "--profile", "kaggle-t4", "--dataset-size", "100"),
                    "SystemExit(3)")


# -- 2. a model builder that raises or returns something else -----------------------------------------------------
MODELS = """
import torch

def as_str(num_classes=10):
    return "resnet18"

def as_none(num_classes=10):
    return None

def as_module_class(num_classes=10):
    return torch.nn.Linear  # the class, not an instance

def raises(num_classes=10):
    raise ValueError("bad width")

def needs_args(depth, num_classes=10):
    return torch.nn.Linear(3, num_classes)

def no_args():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(10))

def kwargs(**kw):
    assert kw["num_classes"] == 10
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.LazyLinear(kw["num_classes"]))
"""


@pytest.mark.parametrize("builder,shown", [("as_str", "returned str, not a torch.nn.Module"),
                                           ("as_none", "returned None, not a torch.nn.Module"),
                                           ("as_module_class", "returned type, not a torch.nn.Module"),
                                           ("raises", "raised ValueError: bad width"),
                                           ("needs_args", "raised TypeError")])
def test_model_builder_that_does_not_build_a_module_is_exit_2(cli, user_module, builder: str, shown: str) -> None:
    mod = user_module(MODELS)
    line = one_error_line(cli("train", "--dry-run", "--data", "synthetic", "--model", f"{mod}:{builder}",
                               "--num-classes", "10"), "--model", shown)
    assert "'str' object has no attribute" not in line


def test_model_builders_get_the_keywords_they_take(user_module) -> None:
    from fasttrain.models.registry import create_model
    mod = user_module(MODELS)
    assert create_model(f"{mod}:no_args", num_classes=10) is not None
    assert create_model(f"{mod}:kwargs", num_classes=10) is not None


# -- 3. --data items that are not (tensor, class index) pairs ------------------------------------------------------
DATA = """
import numpy as np
import torch

class Items(torch.utils.data.Dataset):
    def __init__(self, item):
        self.item = item
    def __len__(self):
        return 8
    def __getitem__(self, i):
        if isinstance(self.item, Exception):
            raise self.item
        return self.item

def make(item):
    return lambda: (Items(item), Items(item), 3)

ints = make((1, 2))
scalar_input = make((torch.tensor(1.0), 1))
string_input = make(("an image", 1))
rank5 = make((torch.zeros(1, 1, 1, 2, 2), 1))
empty_input = make((torch.zeros(0, 3), 1))
string_label = make((torch.zeros(3), "cat"))
float_label = make((torch.zeros(3), 0.5))
negative_label = make((torch.zeros(3), -1))
matrix_label = make((torch.zeros(3), torch.zeros(2, 2)))
triple = make((torch.zeros(3), 1, "extra"))
just_tensor = make(torch.zeros(3))
raises = make(KeyError("no item 0"))

def rank_mismatch():
    return Items((torch.zeros(3), 1)), Items((torch.zeros(1, 3), 1)), 3

good = make((torch.zeros(5, 3), 1))
numpy_items = make((np.zeros((3, 4, 4), dtype=np.float32), np.int64(2)))
soft_labels = make((torch.zeros(3), torch.tensor([0.2, 0.8, 0.0])))
"""

BAD_DATA = {
    "ints": "input is an int, not a tensor",
    "scalar_input": "shape () (rank 0)",
    "string_input": "input is a str, not a tensor",
    "rank5": "rank 5",
    "empty_input": "no values",
    "string_label": "label is a str, not a class index",
    "float_label": "label is a float, not a class index",
    "negative_label": "label is negative",
    "matrix_label": "label is a float32 tensor of shape (2, 2)",
    "triple": "is a 3-tuple, not an (input, label) pair",
    "just_tensor": "is a Tensor, not an (input, label) pair",
    "raises": "train dataset[0] raised KeyError",
    "rank_mismatch": "val dataset[0] input has rank 2, the train set's has rank 1",
}


@pytest.mark.parametrize("name", list(BAD_DATA))
def test_data_items_of_the_wrong_kind_are_exit_2_when_the_data_is_built(cli, user_module, name: str) -> None:
    mod = user_module(DATA)
    one_error_line(cli("train", "--dry-run", "--data", f"{mod}:{name}", "--model", "tiny_cnn",
                        "--set", "loader.batch_size=2"), "--data", BAD_DATA[name])


@pytest.mark.parametrize("name,rank", [("good", 2), ("numpy_items", 3), ("soft_labels", 1)])
def test_check_sample_accepts_usable_items(user_module, name: str, rank: int) -> None:
    import importlib

    from fasttrain.datasets.custom import check_sample
    mod = importlib.import_module(user_module(DATA))
    train, _val, _n = getattr(mod, name)()
    assert check_sample(train, f"{mod.__name__}:{name}") == rank


# -- 4. did-you-mean never suggests the name that was given ----------------------------------------------------------
def test_not_callable_attribute_says_so_without_suggesting_itself(cli, user_module) -> None:
    mod = user_module("NOT_CALLABLE = 5\ndef build():\n    return None\n")
    line = one_error_line(cli("train", "--dry-run", "--data", f"{mod}:NOT_CALLABLE", "--model", "tiny_cnn"),
                           f"{mod}.NOT_CALLABLE is not callable (type int)")
    assert "did you mean" not in line
    line = one_error_line(cli("train", "--dry-run", "--data", f"{mod}:buildd", "--model", "tiny_cnn"),
                           "did you mean 'build'?")
    assert "NOT_CALLABLE" not in line


@pytest.mark.parametrize("spec,shown", [("a:b:c", "'b:c' is not a Python name"), (":", "expected module:callable"),
                                        ("mod:", "expected module:callable"), (":fn", "expected module:callable"),
                                        (".rel:fn", "is not a module name"), ("a b:fn", "is not a module name"),
                                        ("a\x00b:fn", "control characters")])
def test_malformed_module_specs_are_exit_2(cli, spec: str, shown: str) -> None:
    one_error_line(cli("train", "--dry-run", "--data", "synthetic", "--model", spec), "--model", shown)


# -- 5. empty names ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value,shown", [("", "empty"), ("   ", "blank"), ("\t", "blank"),
                                         ("res\x00net", "control characters")])
def test_empty_or_blank_model_and_gpu_are_exit_2(cli, value: str, shown: str) -> None:
    one_error_line(cli("train", "--dry-run", "--data", "synthetic", "--model", value), "--model", shown)
    one_error_line(cli("estimate", "--model", value, "--dataset-size", "100"), "--model", shown)
    one_error_line(cli("estimate", "--model", "tiny_cnn", "--gpu", value, "--dataset-size", "100"), "--gpu", shown)


# -- 6. image sizes the model cannot take -------------------------------------------------------------------------
@pytest.mark.parametrize("size,shown", [("0", "must be a positive number of pixels"),
                                        ("-3", "must be a positive number of pixels"),
                                        ("100000", "larger than 8192 px"),
                                        ("1", "model 'tiny_cnn' cannot take 1 px images")])
def test_estimate_refuses_image_sizes_the_model_cannot_take(cli, size: str, shown: str) -> None:
    line = one_error_line(cli("estimate", "--model", "tiny_cnn", "--image-size", size, "--profile", "kaggle-t4",
                               "--dataset-size", "100"), "--image-size", shown)
    if size == "1":
        assert "takes e.g. 32" in line


def test_vit_is_built_for_the_asked_size_or_refused_with_the_sizes_it_takes(cli) -> None:
    r = cli("estimate", "--model", "vit_tiny_patch16_224", "--image-size", "32", "--profile", "kaggle-t4",
            "--dataset-size", "1000", "--json")
    assert r.code == 0, r.err
    r64 = cli("estimate", "--model", "vit_tiny_patch16_224", "--image-size", "64", "--profile", "kaggle-t4",
              "--dataset-size", "1000", "--json")
    assert r64.code == 0, r64.err
    flops = lambda r: json.loads(r.out)["forecast"]["model"]  # noqa: E731
    assert flops(r) != flops(r64)  # priced at the asked size, not at 224
    one_error_line(cli("estimate", "--model", "vit_tiny_patch16_224", "--image-size", "8", "--profile",
                        "kaggle-t4", "--dataset-size", "100"), "cannot take 8 px images", "built for 224 px",
                    "takes e.g. 32, 64")


def test_check_model_input_and_create_model_at_a_size() -> None:
    import torch

    from fasttrain.models.registry import check_model_input, create_model
    check_model_input("vit_tiny_patch16_224", 64, num_classes=5)
    check_model_input("tiny_cnn", 32, num_classes=5)
    model = create_model("vit_tiny_patch16_224", num_classes=5, image_size=32)
    assert model(torch.randn(1, 3, 32, 32)).shape == (1, 5)  # a real forward at 32 px
    for size in (0, -1, 1, 100_000):
        with pytest.raises(UserError, match="--image-size"):
            check_model_input("tiny_cnn", size, num_classes=5)


def test_plan_check_image_size_is_pure() -> None:
    from fasttrain.plan import MAX_IMAGE_SIZE, check_image_size
    assert check_image_size(224) == 224 and check_image_size(MAX_IMAGE_SIZE) == MAX_IMAGE_SIZE
    for bad in (0, -1, MAX_IMAGE_SIZE + 1, 2**70, 1.5, "224", True, None):
        with pytest.raises(UserError):
            check_image_size(bad)


# -- 7. a cache directory that cannot be used ---------------------------------------------------------------------
def test_cache_that_is_a_file_is_exit_2(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    afile = tmp_path / "cache-file"
    afile.write_text("not a directory")
    monkeypatch.setenv("FASTTRAIN_CACHE", str(afile))
    one_error_line(cli("train", "--dry-run", "--data", "shapes"), "FASTTRAIN_CACHE", "is a file, not a directory",
                    "set FASTTRAIN_CACHE to a writable directory")
    monkeypatch.setenv("FASTTRAIN_CACHE", str(afile / "below"))  # a directory that cannot be created
    one_error_line(cli("train", "--dry-run", "--data", "shapes"), "FASTTRAIN_CACHE", "cannot create or write",
                    str(afile / "below"))
    monkeypatch.setenv("FASTTRAIN_CACHE", "   ")
    one_error_line(cli("train", "--dry-run", "--data", "shapes"), "FASTTRAIN_CACHE", "blank")
    monkeypatch.setenv("FASTTRAIN_CACHE", "~no_such_user_here/cache")  # a ~user with no home: no expansion
    one_error_line(cli("train", "--dry-run", "--data", "shapes"), "FASTTRAIN_CACHE", "cannot expand",
                   "no user 'no_such_user_here' on this machine")


def test_data_under_a_home_that_does_not_exist_is_exit_2(cli) -> None:
    """`~0` (found by Hypothesis in test_api.py): pathlib raised RuntimeError for a ~user without a home."""
    for spec in ("~0", "~no_such_user_here/photos"):
        for command in (("train", "--dry-run"), ("estimate", "--model", "tiny_cnn"), ("bench", "loader")):
            one_error_line(cli(*command, "--data", spec), "--data")


def test_home_that_cannot_hold_the_cache_is_exit_2(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    monkeypatch.delenv("FASTTRAIN_CACHE")
    monkeypatch.setenv("HOME", str(home))
    one_error_line(cli("train", "--dry-run", "--data", "shapes"), "cannot create or write the cache directory",
                    str(home / ".cache" / "fasttrain"), "set FASTTRAIN_CACHE")


def test_writable_cache_dir(tmp_path: Path) -> None:
    from fasttrain.core.cache_dir import writable_cache_dir
    assert writable_cache_dir(tmp_path / "a" / "b") == tmp_path / "a" / "b"
    assert list((tmp_path / "a" / "b").iterdir()) == []  # the write probe is gone
    (tmp_path / "f").write_text("")
    with pytest.raises(UserError, match="is a file"):
        writable_cache_dir(tmp_path / "f")


# -- 8. bench compare of files that are not bench results ---------------------------------------------------------
GOOD = {"schema": 1, "kind": "speedups", "machine": {"hostname": "h", "gpus": []},
        "rows": [{"setting": "baseline", "images_per_s": 10.0, "speedup": 1.0, "status": "measured"}]}
NOT_RESULTS = {
    "null": ("null", "holds a JSON null"),
    "list": ("[1, 2]", "holds a JSON array"),
    "number": ("42", "holds a JSON number"),
    "string": ('"speedups"', "holds a JSON string"),
    "no_kind": ("{}", "no 'kind' key"),
    "bad_kind": ('{"kind": "weights"}', "'kind' is 'weights'"),
    "no_setting": (json.dumps({**GOOD, "rows": [{"images_per_s": 1.0, "status": "measured"}]}),
                   "rows[0] has no 'setting'"),
    "no_status": (json.dumps({**GOOD, "rows": [{"setting": "x"}]}), "has no 'status'"),
    "rows_not_list": (json.dumps({**GOOD, "rows": {"a": 1}}), "'rows' is not a list of objects"),
    "rate_text": (json.dumps({**GOOD, "rows": [{"setting": "x", "status": "m", "images_per_s": "fast"}]}),
                  "'rows[0].images_per_s' is a JSON string, not a number"),
    "loader_missing": (json.dumps({"kind": "loader", "points": [{"workers": 1}]}), "points[0] has no 'prefetch'"),
    "machine_list": (json.dumps({**GOOD, "machine": []}), "'machine' is a JSON array"),
    "gpus_number": (json.dumps({**GOOD, "machine": {"gpus": 3}}), "'machine.gpus' is not a list"),
    "batch_search_text": (json.dumps({"kind": "batch", "search": "x"}), "'search' is a JSON string"),
    "truncated": ('{"kind": "speedups", "rows": [', "not JSON"),
    "deep": ("[" * 100_000 + "]" * 100_000, "not JSON"),
}


@pytest.mark.parametrize("case", list(NOT_RESULTS))
def test_bench_compare_of_a_file_that_is_not_a_result_is_exit_2(cli, tmp_path: Path, case: str) -> None:
    from fasttrain.bench.results import write_result
    write_result(tmp_path / "good", GOOD)
    text, shown = NOT_RESULTS[case]
    bad = tmp_path / f"{case}.json"
    bad.write_text(text)
    line = one_error_line(cli("bench", "compare", str(tmp_path / "good"), str(bad)), "B ", shown)
    assert len(line) < 400


def test_bench_compare_reports_each_bad_file(cli, tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 4)
    huge = tmp_path / "huge.json"
    with huge.open("wb") as fh:  # sparse: 64 MiB without writing them
        fh.truncate(64 * 2**20)
    empty_dir = tmp_path / "run"
    empty_dir.mkdir()
    for a, b, shown_a, shown_b in ((junk, huge, "not text (binary data)", "too large for a bench result"),
                                   (empty_dir, tmp_path / "missing", "not a bench result: directory without a "
                                    "result.json", "not a bench result: no such file")):
        r = cli("bench", "compare", str(a), str(b))
        assert r.code == 2 and "Traceback" not in r.err
        lines = [ln for ln in r.err.splitlines() if ln.startswith("fasttrain: error:")]
        assert len(lines) == 2, r.err
        assert lines[0].startswith("fasttrain: error: A ") and shown_a in lines[0], lines
        assert lines[1].startswith("fasttrain: error: B ") and shown_b in lines[1], lines


def test_bench_compare_of_two_good_results_still_works(cli, tmp_path: Path) -> None:
    from fasttrain.bench.results import write_result
    write_result(tmp_path / "a", GOOD)
    write_result(tmp_path / "b", {**GOOD, "rows": [{**GOOD["rows"][0], "images_per_s": 20.0}]})
    r = cli("bench", "compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert r.code == 0 and "2.00x" in r.out, r.err


# -- 9 and 10. the seed and minutes options train should use -----------------------------------------------------
def _option_app():
    import typer

    from fasttrain.commands import options

    app = typer.Typer()

    @app.command()
    def run(seed: int = options.seed_option(), minutes: float = options.save_every_minutes_option()) -> None:
        print(f"seed={seed} minutes={minutes}")

    return app


def _run_options(*args: str) -> tuple[int, str]:
    """Through the same error handling as fasttrain.cli.main: UserError -> its one line and exit 2."""
    app = _option_app()
    try:
        app(args=list(args), standalone_mode=False)
    except UserError as exc:
        return 2, exc.lines()[0]
    return 0, ""


@pytest.mark.parametrize("seed", ["-1", str(2**32), str(2**70), str(-(2**70))])
def test_seed_option_refuses_what_the_rngs_refuse(seed: str) -> None:
    code, line = _run_options("--seed", seed)
    assert code == 2 and line.startswith("--seed: must be a whole number from 0 to 4,294,967,295")


def test_seed_option_accepts_every_seed_the_rngs_take() -> None:
    import random

    import numpy as np
    import torch

    from fasttrain.commands.options import MAX_SEED, check_seed
    for seed in (0, 1, MAX_SEED):
        assert _run_options("--seed", str(seed))[0] == 0
        assert check_seed(seed) == seed
        random.seed(seed), np.random.seed(seed), torch.manual_seed(seed)  # none of them refuses it


@pytest.mark.parametrize("minutes", ["nan", "inf", "-inf", "-1", "0", "-0.0"])
def test_minutes_option_refuses_non_finite_and_non_positive(minutes: str) -> None:
    code, line = _run_options("--save-every-minutes", minutes)
    assert code == 2 and line.startswith("--save-every-minutes: must be a positive, finite number of minutes")


def test_minutes_option_accepts_positive_minutes() -> None:
    from fasttrain.commands.options import check_minutes
    assert _run_options("--save-every-minutes", "0.5")[0] == 0
    assert check_minutes(30) == 30.0 and check_minutes(None) is None
    assert all(isinstance(check_minutes(v), float) for v in (1, 1e6)) and not math.isnan(check_minutes(1.0))


@pytest.mark.parametrize("seed", ["-1", str(2**32), str(2**70)])
def test_train_refuses_seeds_the_rngs_refuse_when_the_data_is_built(cli, tmp_path: Path, seed: str) -> None:
    from image_tree import write_tree
    folder = write_tree(tmp_path / "imgs", {"cat": 4, "dog": 4})
    for data in (str(folder), "synthetic"):
        one_error_line(cli("train", "--dry-run", "--data", data, "--seed", seed), "--seed: must be a whole number")


# -- numbers past any real run: refused, not priced or crashed on --------------------------------------------------
def test_huge_counts_are_exit_2(cli) -> None:
    base = ("estimate", "--model", "tiny_cnn", "--profile", "kaggle-t4")
    one_error_line(cli(*base, "--num-classes", str(2**70)), "--num-classes: must be a whole number from 1")
    one_error_line(cli(*base, "--dataset-size", str(2**70)), "--dataset-size: more than")
    one_error_line(cli(*base, "--epochs", str(2**40)), "--epochs: must be a whole number from 1")
    one_error_line(cli("train", "--dry-run", "--data", "synthetic", "--num-classes", str(2**70)),
                    "--num-classes: must be a whole number from 1")
    one_error_line(cli("train", "--dry-run", "--data", "  "), "--data: blank data spec")
    one_error_line(cli("train", "--dry-run", "--data", "a\x00b"), "--data: the data spec contains a NUL byte")
    one_error_line(cli(*base, "--gpu", "T" * 5000), "--gpu: 5,000 characters long")


# -- train itself makes the checks above (not only estimate and the options) -----------------------------------
def test_train_refuses_an_image_size_the_model_cannot_take(cli) -> None:
    one_error_line(cli("train", "--dry-run", "--data", "synthetic", "--model", "tiny_cnn", "--image-size", "1"),
                    "--image-size", "cannot take 1 px", "tiny_cnn takes e.g.")


def test_train_builds_a_vit_for_the_asked_size(cli) -> None:
    result = cli("train", "--dry-run", "--data", "synthetic", "--model", "vit_tiny_patch16_224", "--image-size", "32")
    assert result.code == 0, result.err


@pytest.mark.parametrize("minutes", ["nan", "inf", "-1", "0"])
def test_train_refuses_save_every_minutes_that_is_not_positive_and_finite(cli, minutes: str) -> None:
    one_error_line(cli("train", "--dry-run", "--data", "synthetic", "--save-every-minutes", minutes),
                    "--save-every-minutes: must be a positive, finite number of minutes")


@pytest.mark.parametrize("seed", ["-1", str(2**70)])
def test_train_seed_option_refuses_what_the_rngs_refuse(cli, seed: str) -> None:
    one_error_line(cli("train", "--dry-run", "--data", "synthetic", "--seed", seed), "--seed: must be a whole number")


def test_batch_search_cache_in_a_file_is_one_line(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "cachefile"
    blocker.write_text("x")
    monkeypatch.setenv("FASTTRAIN_CACHE", str(blocker))
    from fasttrain.train.setup.batch_search import cache_path
    with pytest.raises(UserError, match="is a file, not a directory"):
        cache_path()


@pytest.mark.parametrize("argv", [["train", "--dry-run"], ["estimate", "--model", "tiny_cnn", "--image-size", "32"],
                                  ["doctor"]])
@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_profile_is_refused_not_the_machine_default(cli, argv: list[str], value: str) -> None:
    one_error_line(cli(*argv, "--profile", value), "--profile: is empty")
