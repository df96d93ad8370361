"""Using the trained model (issue 25, point 10): a run leaves model.safetensors + model.json (class names, input
size, normalisation); `fasttrain predict RUN --data DIR` writes a CSV of file, class, confidence; the load snippet
of docs/train.md runs as written on a real run."""
from __future__ import annotations

import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, child_env
from loop_helpers import TINY_PROFILE, write_image_folder


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(run folder, data folder) of one real 2-epoch run on 3 colour classes."""
    from fasttrain.cli import main
    root = tmp_path_factory.mktemp("predict")
    data = write_image_folder(root / "data", classes=3, train_per_class=8, val_per_class=4)
    (root / "tiny.yaml").write_text(TINY_PROFILE)
    code = main(["train", "--profile", str(root / "tiny.yaml"), "--data", str(data), "--model", "tiny_cnn",
                 "--runs-dir", str(root / "runs"), "--run-name", "r", "--no-tune", "--quiet"])
    assert code == 0
    return root / "runs" / "r", data


def test_a_run_leaves_weights_and_what_it_takes_to_use_them(trained) -> None:
    run, _ = trained
    meta = json.loads((run / "model.json").read_text())
    assert meta["class_names"] == ["class0", "class1", "class2"] and meta["num_classes"] == 3
    assert meta["image_size"] == 16 and len(meta["mean"]) == 3 and len(meta["std"]) == 3
    assert meta["from"] == "best epoch" and meta["model"] == "tiny_cnn"
    summary = json.loads((run / "summary.json").read_text())
    assert meta["epoch"] == summary["best_epoch"] and meta["val_acc1"] == summary["best_val_acc1"]
    assert not (run / "best.pt").exists()  # model.safetensors is the one copy of the best weights
    assert summary["model_files"].startswith(str(run / "model.safetensors"))


def test_a_run_that_validates_mirrored_loads_as_a_model_that_predicts_mirrored(trained) -> None:
    """The cpu preset validates each image with its mirror image where flips are on (colour classes: on), so the
    loaded model averages the same two logits: predictions match what the run's accuracy measured."""
    import torch
    from safetensors.torch import load_file

    from fasttrain.models.registry import create_model
    from fasttrain.models.saved import load_trained
    run, _ = trained
    meta = json.loads((run / "model.json").read_text())
    assert meta["test_flip"] is True
    loaded, _ = load_trained(run)
    bare = create_model("tiny_cnn", 3, image_size=16)
    bare.load_state_dict(load_file(str(run / "model.safetensors")))
    bare.eval()
    images = torch.randn(5, 3, 16, 16)
    with torch.inference_mode():
        want = (bare(images) + bare(images.flip(-1))) / 2
        assert torch.allclose(loaded(images), want, atol=1e-5)
        assert not torch.allclose(bare(images), want, atol=1e-5)  # the mirror changes this model's answer
    meta["test_flip"] = False
    (run / "model.json").write_text(json.dumps(meta))
    try:
        plain, _ = load_trained(run)
        with torch.inference_mode():
            assert torch.allclose(plain(images), bare(images), atol=1e-6)
    finally:
        meta["test_flip"] = True
        (run / "model.json").write_text(json.dumps(meta))


def test_predict_writes_a_csv_of_file_class_confidence(cli, trained, tmp_path: Path) -> None:
    run, data = trained
    result = cli("predict", str(run), "--data", str(data / "val"))
    assert result.code == 0, result.err
    rows = list(csv.DictReader(io.StringIO(result.out)))
    assert len(rows) == 12 and list(rows[0]) == ["file", "class", "confidence"]
    assert {r["class"] for r in rows} <= {"class0", "class1", "class2"}
    assert all(0 < float(r["confidence"]) <= 1 for r in rows)
    assert rows[0]["file"] == str(Path("class0") / "0.png")
    assert "predicted 12 image(s)" in result.err
    out = tmp_path / "p.csv"
    assert cli("predict", str(run), "--data", str(data / "val"), "--out", str(out)).code == 0
    assert out.read_text().splitlines()[0] == "file,class,confidence"
    as_json = json.loads(cli("predict", str(run), "--data", str(data / "val" / "class1"), "--json").out)
    assert len(as_json["predictions"]) == 4 and as_json["unreadable"] == []


def test_predict_skips_and_counts_an_unreadable_image(cli, trained, tmp_path: Path) -> None:
    run, data = trained
    folder = tmp_path / "new"
    folder.mkdir()
    (folder / "ok.png").write_bytes((data / "val" / "class0" / "0.png").read_bytes())
    (folder / "broken.png").write_bytes(b"not a png")
    result = cli("predict", str(run), "--data", str(folder))
    assert result.code == 0 and len(result.out.splitlines()) == 2
    assert "1 unreadable file(s) skipped" in result.err and "broken.png" in result.err


@pytest.mark.parametrize("case", ["no run", "no model files", "no images"])
def test_predict_on_bad_input_is_one_line(cli, trained, tmp_path: Path, case: str) -> None:
    run, data = trained
    empty = tmp_path / "empty"
    empty.mkdir()
    args = {"no run": (str(tmp_path / "nope"), str(data)), "no model files": (str(empty), str(data)),
            "no images": (str(run), str(empty))}[case]
    result = cli("predict", args[0], "--data", args[1])
    assert result.code == 2 and "Traceback" not in result.err
    assert len([ln for ln in result.err.splitlines() if ln.startswith("fasttrain: error:")]) == 1, result.err


def test_the_documented_load_runs_as_written(trained, tmp_path: Path) -> None:
    run, data = trained
    text = (REPO / "docs" / "train.md").read_text()
    block = re.search(r"## Using the trained model.*?```python\n(.*?)```", text, re.S)
    assert block, "docs/train.md lost its load snippet"
    (tmp_path / "photo.png").write_bytes((data / "val" / "class2" / "1.png").read_bytes())
    code = block.group(1).replace("runs/NAME", str(run))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=child_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    name, confidence = proc.stdout.split()
    assert name in ("class0", "class1", "class2") and 0 < float(confidence) <= 1
