"""Every reader of `--data` takes a labels table as `train` does (datasets/data_source.find_samples): `estimate`
prices decoding once into RAM as train plans it, `data prepare train.csv` packs the table's classes and split,
`bench loader` measures a table and compares a set prepared from one against its source files. Real PNGs, the
real CLI, tiny_cnn."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_train_csv import CLASSES, competition

SMALL_BATCH = ("--set", "loader.batch_size=8")  # 8 images a class: 21 training images hold no batch of 64
# bench loader's smallest settings (tests/test_data_prepare.py): one round of two batches, no worker processes
BENCH = ("--image-size", "16", "--batch-size", "4", "--max-workers", "0", "--rounds", "1", "--batches", "2",
         "--max-seconds", "0.3", "--model", "none", "--compare-images", "16", "--json")


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def _on_cpu() -> bool:
    import torch
    return not torch.cuda.is_available()


def test_estimate_and_train_agree_on_decoding_a_table_once(cli, tmp_path: Path) -> None:
    table = competition(tmp_path / "comp") / "train.csv"
    est = cli("estimate", "--data", str(table), "--model", "tiny_cnn", "--image-size", "32", *SMALL_BATCH, "--json")
    assert est.code == 0, est.err
    result = json.loads(est.out)
    assert "--data (21 training images" in result["dataset_size_source"]
    estimate_once = any("train decodes the 24 images once into RAM" in n for n in result["plan_notes"])
    dry = cli("train", "--data", str(table), "--model", "tiny_cnn", "--image-size", "32", *SMALL_BATCH, "--dry-run")
    assert dry.code == 0, dry.err
    train_once = "the 24 images are decoded once into RAM" in dry.out + dry.err
    assert estimate_once == train_once
    if _on_cpu():  # a GPU's workers decode beside it: neither decodes once there
        assert estimate_once and "decoded once into RAM" in result["forecast"]["loader"]["source"]


def two_labels(root: Path) -> Path:
    """A table where two columns could be the label (kind: the class names, group: g0/g1): --set says which."""
    rows = (competition(root) / "train.csv").read_text().splitlines()[1:]
    (root / "two.csv").write_text("image,kind,group\n" + "".join(f"{row},g{i % 2}\n" for i, row in enumerate(rows)))
    return root / "two.csv"


def test_estimate_reads_the_table_with_the_columns_set_names(cli, tmp_path: Path) -> None:
    """Two columns could be the label: the profile's data.label_column settles it for every reader."""
    root = two_labels(tmp_path / "comp").parent
    args = ("estimate", "--data", str(root / "two.csv"), "--model", "tiny_cnn", "--image-size", "32", *SMALL_BATCH)
    refused = cli(*args)
    assert refused.code == 2 and "--set data.label_column=NAME" in refused.err and "Traceback" not in refused.err
    est = cli(*args, "--set", "data.label_column=group", "--json")
    assert est.code == 0, est.err
    result = json.loads(est.out)
    assert "--data (22 training images" in result["dataset_size_source"]  # 1 of each group's 12 held out, not 1 a kind
    if _on_cpu():
        assert any("train decodes the 24 images once into RAM" in n for n in result["plan_notes"])


def test_data_prepare_packs_the_tables_classes_and_split(cli, tmp_path: Path) -> None:
    table = competition(tmp_path / "comp") / "train.csv"
    dst = tmp_path / "dst"
    prep = cli("data", "prepare", str(table), "--out", str(dst), "--image-size", "32", "--workers", "1", "--json")
    assert prep.code == 0, prep.err
    manifest = json.loads((dst / "manifest.json").read_text())
    assert manifest["classes"] == list(CLASSES) and manifest["source"] == str(table.resolve())
    assert (manifest["splits"]["train"]["count"], manifest["splits"]["val"]["count"]) == (21, 3)  # as train splits
    runs = tmp_path / "runs"
    res = cli("train", "--data", str(dst), "--epochs", "1", "--model", "tiny_cnn", "--image-size", "32",
              *SMALL_BATCH, "--runs-dir", str(runs), "--json", "--no-tune")
    assert res.code == 0, res.err
    [meta] = list(runs.glob("*/model.json"))
    assert json.loads(meta.read_text())["class_names"] == list(CLASSES)


def test_data_prepare_takes_the_tables_data_settings(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # bench loader's results
    table = two_labels(tmp_path / "comp")
    args = ("data", "prepare", str(table), "--image-size", "16", "--workers", "1")
    refused = cli(*args, "--out", str(tmp_path / "a"))
    assert refused.code == 2 and "--set data.label_column=NAME" in refused.err and "Traceback" not in refused.err
    other = cli(*args, "--out", str(tmp_path / "a"), "--set", "loader.batch_size=8")
    assert other.code == 2 and "takes only the data.* keys" in other.err
    assert not (tmp_path / "a").exists()
    assert cli(*args, "--out", str(tmp_path / "b"), "--set", "data.label_column=group").code == 0
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["classes"] == ["g0", "g1"] and manifest["splits"]["train"]["count"] == 22
    # its source does not read with the default settings: bench loader measures the shards alone, says why
    res = cli("bench", "loader", "--data", str(tmp_path / "b"), *BENCH, "--out", str(tmp_path / "bench"))
    assert res.code == 0, res.err
    paths = {p["name"]: p for p in json.loads(res.out)["paths"]}
    assert paths["shards"]["images_per_s"] > 0 and "does not read" in paths["torchvision"]["reason"]


def test_bench_loader_measures_a_table_and_a_set_prepared_from_one(cli, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    table = competition(tmp_path / "comp") / "train.csv"
    res = cli("bench", "loader", "--data", str(table), *BENCH, "--out", str(tmp_path / "b1"))
    assert res.code == 0, res.err
    paths = {p["name"]: p for p in json.loads(res.out)["paths"]}
    assert all(paths[n]["images_per_s"] > 0 for n in ("torchvision", "fast-decode", "shards"))
    dst = tmp_path / "dst"
    assert cli("data", "prepare", str(table), "--out", str(dst), "--image-size", "16", "--workers", "1").code == 0
    res = cli("bench", "loader", "--data", str(dst), *BENCH, "--out", str(tmp_path / "b2"))
    assert res.code == 0, res.err
    paths = {p["name"]: p for p in json.loads(res.out)["paths"]}
    # the prepared set's source is the table: its files are found and measured against the shards
    assert paths["torchvision"]["status"] == "measured" and paths["torchvision"]["images_per_s"] > 0
