"""The end of a run on a competition's table suggests the submission's own command: its test images and sample
submission as they sit beside the table (datasets/data_source.submission_inputs, ui/ending.py)."""
from __future__ import annotations

from pathlib import Path

from image_tree import write_png

from fasttrain.datasets.data_source import submission_inputs
from fasttrain.train.run.summary import RunSummary
from fasttrain.ui.ending import ending_lines


def _competition(root: Path, test: str = "test_images", sample: str | None = "sample_submission.csv") -> Path:
    for i in range(2):
        write_png(root / "train_images" / f"a{i}.png", seed=i)
    (root / "test_images" if test == "test_images" else root / test).mkdir(parents=True, exist_ok=True)
    (root / "train.csv").write_text("id,label\na0,cat\na1,dog\n")
    if sample:
        (root / sample).write_text("id,label\nt0,cat\n")
    return root


def test_the_table_and_its_folder_name_the_test_images_and_the_sample(tmp_path: Path) -> None:
    comp = _competition(tmp_path / "comp")
    assert submission_inputs(str(comp / "train.csv")) == {
        "test_images": str(comp / "test_images"), "sample_submission": str(comp / "sample_submission.csv")}
    assert submission_inputs(str(comp)) == submission_inputs(str(comp / "train.csv"))


def test_nothing_without_a_sample_a_test_folder_or_a_table(tmp_path: Path) -> None:
    assert submission_inputs(str(_competition(tmp_path / "a", sample=None) / "train.csv")) is None
    assert submission_inputs(str(tmp_path / "missing.csv")) is None
    assert submission_inputs("shapes") is None and submission_inputs("python:Data#1a2b") is None
    folder = tmp_path / "folder" / "cat"
    write_png(folder / "0.png", seed=0)
    assert submission_inputs(str(folder.parent)) is None  # an ImageFolder tree


def test_the_ending_suggests_the_submission_command(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r 1"
    base = {"run_dir": str(run), "model_files": "model.safetensors + model.json", "epochs_run": 1}
    plain = [line for line in ending_lines(RunSummary.from_json(base)) if line.startswith("predict")]
    assert plain == [f"predict          fasttrain predict '{run}' --data DIR"]
    comp = {"test_images": "comp/test_images", "sample_submission": "comp/sample submission.csv"}
    competition = RunSummary.from_json({**base, "submission_inputs": comp})
    lines = [line for line in ending_lines(competition) if line.startswith("predict")]
    assert lines == [(f"predict          fasttrain predict '{run}' --data comp/test_images --out submission.csv "
                      "--sample-submission 'comp/sample submission.csv'")]
