"""What a newcomer types by mistake (issue 25): each is exit 2 with one line saying why, never a traceback.

Real image files (loop_helpers.write_image_folder), the CLI in-process through its real entry point."""
from __future__ import annotations

from pathlib import Path

import pytest
from conftest import one_error_line
from loop_helpers import write_image_folder


def _one_image_per_class(root: Path) -> Path:
    write_image_folder(root / "src", classes=3, train_per_class=1, val_per_class=0)
    return root / "src" / "train"   # DIR/<class>/0.png: one tree, split by val_fraction


@pytest.mark.parametrize("extra", [[], ["--dry-run"]])
def test_one_image_per_class_is_one_line_not_a_traceback(cli, tmp_path: Path, extra: list[str]) -> None:
    data = _one_image_per_class(tmp_path)
    result = cli("train", "--data", str(data), "--model", "tiny_cnn", "--epochs", "1",
                 "--runs-dir", str(tmp_path / "runs"), *extra)
    one_error_line(result, "--data", "single image", "validate")


def test_read_sizes_of_no_files_is_not_an_error() -> None:
    from fasttrain.datasets.decoded import read_sizes
    sizes, bad = read_sizes([], 16, 10**9)
    assert sizes.shape[0] == 0 and bad == {}


@pytest.mark.parametrize("command", [["profiles", "show", "cpu"], ["train", "--dry-run"]])
def test_extends_given_by_set_is_refused_not_ignored(cli, command: list[str]) -> None:
    one_error_line(cli(*command, "--set", "extends=cpu"), "extends", "--profile")


# -- issue 25, point 12: the small things ---------------------------------------------------------------------------
def test_a_letter_typed_for_a_digit_suggests_the_digit() -> None:
    from fasttrain.core.suggest import close_matches
    names = ["efficientnet_b0", "efficientnet_b6", "efficientnet_b7", "efficientnet_b8", "resnet18"]
    assert close_matches("efficientnet_bo", names)[0] == "efficientnet_b0"
    assert close_matches("resnetl8", names)[0] == "resnet18"


def test_unknown_model_suggests_b0_first(cli) -> None:
    line = one_error_line(cli("estimate", "--model", "efficientnet_bo", "--json"), "efficientnet_bo")
    assert "did you mean 'efficientnet_b0'" in line


def test_an_unknown_set_key_suggests_the_full_key_and_carries_its_value(cli) -> None:
    import json
    result = cli("profiles", "show", "cpu", "--set", "loader.batchsize=3", "--json")
    one_error_line(result, "did you mean 'loader.batch_size'?")
    problem = json.loads(result.out)["error"]["problems"][0]
    assert problem["value"] == 3  # was null


def test_resume_of_a_folder_that_is_not_there_names_the_runs_there(cli, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    (runs / "20261125-cpu").mkdir(parents=True)
    line = one_error_line(cli("train", "--resume", str(runs / "nope"), "--runs-dir", str(runs)),
                           "no run folder or checkpoint file there", "20261125-cpu")
    assert "no such checkpoint file" not in line


def test_dry_run_of_a_small_folder_shows_the_plan_and_why_the_batch_is_smaller(cli, tmp_path: Path) -> None:
    data = write_image_folder(tmp_path / "data", classes=3, train_per_class=10, val_per_class=3)
    result = cli("train", "--data", str(data), "--profile", "cpu", "--dry-run")
    assert result.code == 0, result.err
    assert "batch        4 per device" in result.out
    assert "batch 64 -> 4: the 30 training samples hold no full batch of 64" in result.out
    refused = cli("train", "--data", str(data), "--profile", "cpu", "--dry-run", "--set", "loader.batch_size=64")
    one_error_line(refused, "larger than the 30 training samples")  # a batch the user chose is not changed


def test_fitted_to_data() -> None:
    from fasttrain.train.setup.batch_math import fitted_to_data
    assert fitted_to_data(64, 30) == 4 and fitted_to_data(64, 6400) == 64 and fitted_to_data(8, 0) is None
    assert fitted_to_data(64, 30, world_size=2) == 2
    # never a batch of 1 while a process has 2 samples: batch norm cannot train on one value per channel
    assert fitted_to_data(64, 7) == 2 and fitted_to_data(64, 3) == 2 and fitted_to_data(64, 1) == 1
    assert fitted_to_data(3, 5) == 2


@pytest.mark.parametrize("words,expected", [("fasttrain train --profile ", {"cpu", "kaggle-t4"}),
                                            ("fasttrain train --set loader.b", {"loader.batch_size="}),
                                            ("fasttrain train --model res", {"resnet18", "resnet50"})])
def test_completion_knows_profiles_set_keys_and_models(words: str, expected: set[str]) -> None:
    import os
    import subprocess
    import sys
    cword = len(words.split()) if words.endswith(" ") else len(words.split()) - 1
    env = {**os.environ, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1", "_FASTTRAIN_COMPLETE": "complete_bash",
           "COMP_WORDS": words, "COMP_CWORD": str(cword)}
    code = "import sys\nfrom fasttrain.cli import main\nsys.exit(main(sys.argv[1:]))"
    tab = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert tab.returncode == 0, tab.stderr
    assert expected <= set(tab.stdout.split()), tab.stdout
