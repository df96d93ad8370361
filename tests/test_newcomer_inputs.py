"""What a newcomer types by mistake (issue 25): each is exit 2 with one line saying why, never a traceback.

Real image files (loop_helpers.write_image_folder), the CLI in-process through its real entry point."""
from __future__ import annotations

from pathlib import Path

import pytest

from loop_helpers import write_image_folder


def _one_error_line(result, *needles: str) -> str:  # noqa: ANN001 - CliResult
    assert result.code == 2, (result.code, result.out, result.err)
    assert "Traceback" not in result.err + result.out
    lines = [ln for ln in result.err.splitlines() if ln.startswith("fasttrain: error:")]
    assert len(lines) == 1, result.err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def _one_image_per_class(root: Path) -> Path:
    write_image_folder(root / "src", classes=3, train_per_class=1, val_per_class=0)
    return root / "src" / "train"   # DIR/<class>/0.png: one tree, split by val_fraction


@pytest.mark.parametrize("extra", [[], ["--dry-run"]])
def test_one_image_per_class_is_one_line_not_a_traceback(cli, tmp_path: Path, extra: list[str]) -> None:
    data = _one_image_per_class(tmp_path)
    result = cli("train", "--data", str(data), "--model", "tiny_cnn", "--epochs", "1",
                 "--runs-dir", str(tmp_path / "runs"), *extra)
    _one_error_line(result, "--data", "single image", "validate")


def test_read_sizes_of_no_files_is_not_an_error() -> None:
    from fasttrain.datasets.decoded import read_sizes
    sizes, bad = read_sizes([], 16, 10**9)
    assert sizes.shape[0] == 0 and bad == {}


@pytest.mark.parametrize("command", [["profiles", "show", "cpu"], ["train", "--dry-run"]])
def test_extends_given_by_set_is_refused_not_ignored(cli, command: list[str]) -> None:
    _one_error_line(cli(*command, "--set", "extends=cpu"), "extends", "--profile")
