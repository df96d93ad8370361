"""`fasttrain train --data DIR/train.csv` on a competition-shaped folder, end to end with real PNGs and a real model:
the classes in the run and its model files, the folder itself as --data, bad tables as one line, a DataFrame."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from image_tree import write_corrupt, write_png

CLASSES = ("Bag", "Coat", "Sandal")
FAST = ("--model", "tiny_cnn", "--image-size", "32", "--epochs", "1", "--json", "--no-tune")


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def competition(root: Path, per_class: int = 8) -> Path:
    """What a competition ships: train.csv (id without extension, class name), train_images/, test_images/,
    sample_submission.csv."""
    rows = ["id,label"]
    for c, name in enumerate(CLASSES):
        for i in range(per_class):
            image_id = f"{c:02x}{i:06x}"
            write_png(root / "train_images" / f"{image_id}.png", seed=c * 100 + i, size=12)
            rows.append(f"{image_id},{name}")
    for i in range(4):
        write_png(root / "test_images" / f"t{i:04d}.png", seed=900 + i, size=12)
    (root / "train.csv").write_text("\n".join(rows) + "\n")
    (root / "sample_submission.csv").write_text("id,label\n" + "".join(f"t{i:04d},Bag\n" for i in range(4)))
    return root


def _model_json(runs: Path) -> dict:
    [meta] = list(runs.glob("*/model.json"))
    return json.loads(meta.read_text())


def test_train_csv_keeps_the_class_names(cli, tmp_path: Path) -> None:
    data = competition(tmp_path / "comp")
    res = cli("train", "--data", str(data / "train.csv"), *FAST, "--runs-dir", str(tmp_path / "runs"))
    assert res.code == 0, res.err
    assert "3 classes from column 'label': Bag, Coat, Sandal" in res.err
    meta = _model_json(tmp_path / "runs")
    assert meta["class_names"] == list(CLASSES) and meta["num_classes"] == 3
    summary = json.loads(res.out)
    assert summary["bad_files"] == 0 and any("3 classes from column 'label'" in n for n in summary["plan_notes"])


def test_the_competition_folder_trains_on_its_table_not_its_split_folders(cli, tmp_path: Path) -> None:
    data = competition(tmp_path / "comp")
    res = cli("train", "--data", str(data), *FAST, "--runs-dir", str(tmp_path / "runs"))
    assert res.code == 0, res.err
    assert "look like splits, not classes: read as --data" in res.err
    assert _model_json(tmp_path / "runs")["class_names"] == list(CLASSES)  # not train_images, test_images


def test_split_folders_as_classes_warn_before_training(cli, tmp_path: Path) -> None:
    for split in ("train_images", "test_images"):
        for i in range(4):
            write_png(tmp_path / "d" / split / f"{i}.png", seed=i, size=12)
    res = cli("train", "--data", str(tmp_path / "d"), *FAST[:-2], "--dry-run")
    assert res.code == 0, res.err
    shown = res.out + res.err
    assert "warning: class folders look like splits (test_images, train_images)" in shown
    assert "did you mean --data" in shown


def test_a_corrupt_png_in_the_table_is_skipped_and_counted(cli, tmp_path: Path) -> None:
    data = competition(tmp_path / "comp")
    write_corrupt(data / "train_images" / "00000000.png")  # listed in train.csv, cut short
    res = cli("train", "--data", str(data / "train.csv"), *FAST, "--runs-dir", str(tmp_path / "runs"))
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["bad_files"] == 1 and summary["bad_file_paths"][0].endswith("00000000.png")


@pytest.mark.parametrize(("edit", "sets", "words"), [
    (None, ("--set", "data.label_column=species"), "data.label_column: train.csv has no column 'species'"),
    (lambda t: t.replace("Coat", "Bag").replace("Sandal", "Bag"), (), "has the same label ('Bag')"),
    (lambda t: t.split("\n")[0] + "\n", (), "has only a header"),
    (lambda t: "", (), "train.csv is empty"),
    (lambda t: t.replace("\n0", "\nx", 6), (), "6 of 24 rows with no image file"),
    (None, ("--set", "data.images_dir=nowhere"), "data.images_dir: no folder"),
    (None, ("--set", "data.images_dir=test_images"), "no column's values name image files (looked in test_images/"),
])
def test_bad_tables_are_one_line_and_exit_2(cli, tmp_path: Path, edit, sets, words) -> None:
    data = competition(tmp_path / "comp")
    table = data / "train.csv"
    if edit is not None:
        table.write_text(edit(table.read_text()))
    res = cli("train", "--data", str(table), *FAST, *sets, "--runs-dir", str(tmp_path / "runs"))
    assert res.code == 2, res.out + res.err
    assert words in res.err and "Traceback" not in res.err
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*/model.json"))


def test_binary_file_named_csv(cli, tmp_path: Path) -> None:
    (tmp_path / "train.csv").write_bytes(bytes(range(256)) * 4)
    res = cli("train", "--data", str(tmp_path / "train.csv"), *FAST)
    assert res.code == 2 and "binary data, not a text table" in res.err and "Traceback" not in res.err


def test_estimate_counts_the_tables_images(cli, tmp_path: Path) -> None:
    data = competition(tmp_path / "comp")
    res = cli(
        "estimate",
        "--model",
        "tiny_cnn",
        "--image-size",
        "32",
        "--data",
        str(data / "train.csv"),
        "--batch-size",
        "8",
        "--json",
    )
    assert res.code == 0, res.err
    payload = json.loads(res.out)
    assert "--data (21 training images" in json.dumps(payload)


def test_a_dataframe_from_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pandas = pytest.importorskip("pandas")
    import fasttrain

    data = competition(tmp_path / "comp")
    frame = pandas.read_csv(data / "train.csv", dtype={"id": str})
    frame["id"] = "comp/train_images/" + frame["id"] + ".png"  # paths relative to the current folder
    monkeypatch.chdir(tmp_path)
    plan = fasttrain.plan("tiny_cnn", frame, image_size=32, epochs=1)
    assert plan.to_dict()["data"]["num_classes"] == 3 and plan.to_dict()["data"]["train_size"] == 21
    assert any("24 images (id, beside it), 3 classes from column 'label'" in n for n in plan.to_dict()["notes"])
    frame["id"] = frame["id"].str.replace("comp/train_images/", "", regex=False)  # ids, with their folder apart
    summary = fasttrain.train(
        "tiny_cnn",
        frame,
        image_size=32,
        epochs=1,
        quiet=True,
        runs_dir=str(tmp_path / "r"),
        images_dir=os.path.join("comp", "train_images"),
    )
    assert summary.to_dict()["epochs_run"] == 1
    assert _model_json(tmp_path / "r")["class_names"] == list(CLASSES)
