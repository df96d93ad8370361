"""What the forecast and the plan assume about the data (issue 43 item 4): `estimate` without --data says on its
first lines that it priced ImageNet-1k, and a plan that trains small images far above their stored size (a GPU
preset's 224 px on 28 px images) says it is upscaling, what that costs and the --image-size that trains near their
own size: in `train --dry-run`, in the run's opening notes and summary, and in `estimate --data`. Real PNG files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from image_tree import write_tree

NOTE = ("upscaling: the images are 28 px, trained at 224 px: 64x the pixels of each image, about 49x the compute of "
        "--image-size 32; --image-size 32 trains near their own size")


@pytest.fixture(scope="module")
def small_images(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Fashion-MNIST's size: 28 px PNG files in class folders."""
    return write_tree(tmp_path_factory.mktemp("data") / "fashion", {"shirt": 12, "boot": 12}, size=28)


def test_estimate_without_data_names_the_data_set_it_assumed_in_its_first_lines(cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    res = cli("estimate", "--model", "resnet18", "--image-size", "32")
    assert res.code == 0, res.err
    first = res.out.splitlines()[:5]
    assert any("ImageNet-1k" in line and "assumed" in line and "--data" in line for line in first), first
    assert all(len(line) <= 80 for line in first), first


def test_estimate_with_dataset_size_says_so_and_assumes_nothing(cli) -> None:
    res = cli("estimate", "--model", "tiny_cnn", "--image-size", "32", "--dataset-size", "60000")
    assert res.code == 0, res.err
    assert "data: --dataset-size (60,000 training images)" in res.out and "assumed" not in res.out


def test_a_dry_run_at_a_gpu_preset_size_says_it_upscales_and_what_it_costs(cli, small_images: Path) -> None:
    res = cli("train", "--dry-run", "--profile", "kaggle-t4", "--data", str(small_images), "--model", "resnet18")
    assert res.code == 0, res.err
    assert f"note         {NOTE}" in res.out.splitlines()


def test_a_plan_near_the_images_size_has_no_upscaling_note(cli, small_images: Path) -> None:
    res = cli("train", "--dry-run", "--profile", "kaggle-t4", "--data", str(small_images), "--model", "resnet18",
              "--image-size", "32", "--json")
    assert res.code == 0, res.err
    notes = json.loads(res.out)["notes"]
    assert notes and not [n for n in notes if "upscaling" in n]


def test_the_run_opens_with_the_upscaling_note_and_keeps_it(cli, small_images: Path, tmp_path: Path) -> None:
    res = cli("train", "--profile", "kaggle-t4", "--data", str(small_images), "--model", "tiny_cnn", "--epochs", "1",
              "--batch-size", "8", "--runs-dir", str(tmp_path / "runs"), "--run-name", "up")
    assert res.code == 0, res.err
    assert f"note: {NOTE}" in res.out.splitlines()
    assert NOTE in json.loads((tmp_path / "runs" / "up" / "summary.json").read_text())["plan_notes"]


def test_estimate_data_says_it_upscales(cli, small_images: Path) -> None:
    res = cli("estimate", "--profile", "kaggle-t4", "--data", str(small_images), "--model", "resnet18",
              "--batch-size", "8")
    assert res.code == 0, res.err
    assert f"note: {NOTE}" in res.out.splitlines()
    assert "data: --data (22 training images" in res.out


@given(sides=st.lists(st.integers(1, 4096), min_size=1, max_size=50), image_size=st.integers(8, 1024))
def test_the_note_appears_exactly_when_the_trained_side_is_twice_the_stored_one(sides: list[int],
                                                                               image_size: int) -> None:
    from fasttrain.datasets.upscale_check import (
        UPSCALE_MIN,
        stored_side,
        suggested_size,
        upscale_note,
    )
    note = upscale_note(sides, image_size)
    side = stored_side(sides)
    assert side is not None and (note is not None) == (image_size >= UPSCALE_MIN * side)
    if note is not None:
        size = suggested_size(side)
        assert f"the images are {side} px, trained at {image_size} px" in note
        assert size >= side and size % 16 == 0 and f"--image-size {size} trains" in note
    assert upscale_note([], image_size) is None
