"""`fasttrain predict --sample-submission` end to end on real runs, and the bar behind it: predict's labels on a
run's own validation images score what the run's validation measured, whether validation decoded the images
once into RAM or per epoch; `fasttrain.predict()` returns the CLI's rows."""
from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from loop_helpers import TINY_PROFILE
from PIL import Image

COLOURS = [(200, 60, 60), (60, 200, 60), (60, 60, 200)]


def write_hard_folder(root: Path, train_per_class: int = 30, val_per_class: int = 60) -> Path:
    """train/ and val/ of 3 colour classes drowned in noise, images of many sizes (14..39 px a side): resize and
    crop matter, and the accuracy after one epoch is neither 0 nor 1."""
    rng = np.random.default_rng(1)
    for split, per_class in (("train", train_per_class), ("val", val_per_class)):
        for c, colour in enumerate(COLOURS):
            folder = root / split / f"class{c}"
            folder.mkdir(parents=True)
            for i in range(per_class):
                h, w = rng.integers(14, 40, 2)
                pixels = np.array(colour) * rng.uniform(0.5, 1.2) + rng.normal(0, 160, (h, w, 3))
                Image.fromarray(np.clip(pixels, 0, 255).astype("uint8")).save(folder / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], Path]:
    """({"ram": run decoded once into RAM, "per_epoch": run decoded per epoch}, data folder)."""
    from fasttrain.cli import main
    root = tmp_path_factory.mktemp("submission")
    data = write_hard_folder(root / "data")
    (root / "tiny.yaml").write_text(TINY_PROFILE)
    found = {}
    for name, extra in (("ram", []), ("per_epoch", ["--set", "loader.decode_once=false"])):
        code = main(["train", "--profile", str(root / "tiny.yaml"), "--data", str(data), "--model", "tiny_cnn",
                     "--epochs", "1", "--runs-dir", str(root / "runs"), "--run-name", name, "--no-tune", "--quiet",
                     *extra])
        assert code == 0
        found[name] = root / "runs" / name
    return found, data


@pytest.mark.parametrize("path", ["ram", "per_epoch"])
def test_predict_on_the_validation_images_scores_what_validation_measured(cli, runs, path: str) -> None:
    found, data = runs
    run = found[path]
    summary = json.loads((run / "summary.json").read_text())
    in_ram = any("decoded once into RAM" in n for n in summary["plan_notes"])
    assert in_ram == (path == "ram")  # each run took the validation path it is here to test
    result = cli("predict", str(run), "--data", str(data / "val"))
    assert result.code == 0, result.err
    rows = list(csv.DictReader(io.StringIO(result.out)))
    assert len(rows) == 180
    right = sum(r["class"] == Path(r["file"]).parts[0] for r in rows)
    measured = summary["final_val_acc1"] * 180
    assert 0.4 < summary["final_val_acc1"] < 1.0  # a score that a different preprocessing can move
    assert abs(right - measured) <= 1, (right, measured)


@pytest.fixture
def competition(runs, tmp_path: Path) -> tuple[Path, Path, Path, list[str]]:
    """(run, test_images/ with hex-named PNGs, sample_submission.csv naming them without extension in another
    order, the ids in the sample's order)."""
    found, data = runs
    test = tmp_path / "test_images"
    test.mkdir()
    ids = []
    for k, image in enumerate(sorted((data / "val").rglob("*.png"))[::20]):
        ids.append(f"{k * 7919 % 65536:04x}")
        shutil.copy(image, test / f"{ids[-1]}.png")
    ids.reverse()
    sample = tmp_path / "sample_submission.csv"
    sample.write_text("image_id,label\n" + "".join(f"{i},class0\n" for i in ids))
    return found["ram"], test, sample, ids


def test_a_submission_has_the_samples_ids_order_and_columns(cli, competition, tmp_path: Path) -> None:
    run, test, sample, ids = competition
    out = tmp_path / "submission.csv"
    result = cli("predict", str(run), "--data", str(test), "--out", str(out), "--sample-submission", str(sample))
    assert result.code == 0, result.err
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert list(rows[0]) == ["image_id", "label"] and [r["image_id"] for r in rows] == ids
    assert {r["label"] for r in rows} <= {"class0", "class1", "class2"}
    probs = tmp_path / "probs.csv"
    assert cli("predict", str(run), "--data", str(test), "--out", str(probs), "--sample-submission", str(sample),
               "--probabilities").code == 0
    table = list(csv.DictReader(io.StringIO(probs.read_text())))
    assert list(table[0]) == ["image_id", "class0", "class1", "class2"] and [r["image_id"] for r in table] == ids
    assert all(abs(sum(float(r[c]) for c in ("class0", "class1", "class2")) - 1) < 1e-4 for r in table)
    best = [max(("class0", "class1", "class2"), key=lambda c: float(r[c])) for r in table]
    assert best == [r["label"] for r in rows]


def test_fasttrain_predict_returns_the_rows_the_cli_writes(cli, competition, tmp_path: Path) -> None:
    import fasttrain
    run, test, sample, ids = competition
    got = fasttrain.predict(run, test, sample_submission=sample)
    out = tmp_path / "cli.csv"
    assert cli("predict", str(run), "--data", str(test), "--out", str(out), "--sample-submission",
               str(sample)).code == 0
    assert got.csv() == out.read_text() and len(got) == len(ids) and got.columns == ["image_id", "label"]
    assert got.rows == list(csv.DictReader(io.StringIO(out.read_text())))
    assert "<table>" in got._repr_html_() and ids[0] in got._repr_html_()
    frame = got.to_dataframe() if _has_pandas() else None
    assert frame is None or list(frame["image_id"]) == ids
    assert got.to_csv(tmp_path / "api.csv").read_text() == out.read_text()


def _has_pandas() -> bool:
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


def test_images_the_sample_does_not_name_are_left_out_and_said(cli, competition, tmp_path: Path) -> None:
    run, test, sample, ids = competition
    shutil.copy(next(test.iterdir()), test / "extra.png")
    result = cli("predict", str(run), "--data", str(test), "--sample-submission", str(sample))
    assert result.code == 0 and len(result.out.splitlines()) == len(ids) + 1
    assert "1 image(s) not in the sample submission left out, e.g. extra.png" in result.err


@pytest.mark.parametrize("case", ["id with no image", "unreadable image", "empty sample", "no such sample",
                                  "wrong columns"])
def test_a_submission_that_cannot_be_whole_is_one_error_and_no_file(cli, competition, tmp_path: Path,
                                                                     case: str) -> None:
    run, test, sample, ids = competition
    if case == "id with no image":
        sample.write_text(sample.read_text() + "ffffff,class0\nfffffe,class0\n")
    elif case == "unreadable image":
        (test / f"{ids[0]}.png").write_bytes(b"not a png")
    elif case == "empty sample":
        sample.write_text("")
    elif case == "no such sample":
        sample = tmp_path / "nope.csv"
    else:
        sample.write_text("image_id,a,b\nx,1,2\n")
    out = tmp_path / "submission.csv"
    result = cli("predict", str(run), "--data", str(test), "--out", str(out), "--sample-submission", str(sample))
    assert result.code == 2 and "Traceback" not in result.err and not out.exists()
    errors = [ln for ln in result.err.splitlines() if ln.startswith("fasttrain: error:")]
    assert len(errors) == 1, result.err
    needle = {
        "id with no image": f"2 of the sample's {len(ids) + 2} ids have no image",
        "unreadable image": f"{ids[0]}.png",
        "empty sample": "empty",
        "no such sample": "cannot read",
        "wrong columns": "neither an id",
    }[case]
    assert needle in result.err, result.err


@pytest.mark.parametrize("suffix", [".png", ".jpg"])
def test_validation_decoded_in_ram_and_predict_see_the_same_pixels(tmp_path: Path, suffix: str) -> None:
    """The pixels behind the parity above, image by image: a set validated from RAM (decoded_images.py) and
    predict (inference.batches) normalise the same uint8 crops; sizes from under the crop to 4x over it."""
    import torch

    from fasttrain.datasets.decoded import read_sizes
    from fasttrain.datasets.decoded_images import DecodedImages
    from fasttrain.datasets.inference import batches
    from fasttrain.datasets.transforms import CROP_PCT, MEAN, STD

    rng = np.random.default_rng(2)
    files = []
    for i, (h, w) in enumerate([(10, 30), (64, 17), (33, 33), (60, 50), (18, 18)]):
        files.append(tmp_path / f"{i}{suffix}")
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(files[-1])
    samples = [(str(f), 0) for f in files]
    sizes, bad = read_sizes(samples, 16, 1 << 30)
    held, _, _ = DecodedImages(samples, sizes, bad, 16, None).batch(list(range(len(files))), np.zeros(5, np.uint64))
    _, predicted, unreadable = next(batches(files, 16, CROP_PCT, MEAN, STD, 64))
    assert unreadable == [] and held.shape == predicted.shape == (5, 3, 16, 16)
    assert torch.allclose(held, predicted, atol=1e-5), (held - predicted).abs().max()
