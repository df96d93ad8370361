"""A `module:callable` builder is called once per run (not again on the meta device, where its load_state_dict
printed a UserWarning per tensor), and its run is usable by `fasttrain predict` from another folder: model.json
records the folder its module came from. Real children: train in folder A, predict from folder B."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from conftest import run_subprocess
from image_tree import write_tree

BUILDER = '''\
import os
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent


def build(num_classes):
    with open(HERE / "calls.txt", "a") as f:
        f.write("called\\n")
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1),
                        nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, num_classes))
    start = HERE / "start.pt"
    if start.is_file():  # the user's own start, as a builder that fine-tunes would load it
        net.load_state_dict(torch.load(start, weights_only=True))
    return net
'''

ENV = {"OMP_NUM_THREADS": "1"}


def _folder_a(tmp_path: Path) -> tuple[Path, Path]:
    a = tmp_path / "A"
    a.mkdir()
    (a / "mybuild.py").write_text(BUILDER)
    data = write_tree(tmp_path / "data", {"cat": 6, "dog": 6}, size=32)
    return a, data


def test_builder_called_once_without_warnings_and_predict_from_another_folder(tmp_path: Path) -> None:
    a, data = _folder_a(tmp_path)
    import sys
    sys.path.insert(0, str(a))
    try:
        import mybuild
        import torch
        torch.save(mybuild.build(2).state_dict(), a / "start.pt")
    finally:
        sys.path.remove(str(a))
        sys.modules.pop("mybuild", None)
    (a / "calls.txt").unlink()
    res = run_subprocess("train", "--model", "mybuild:build", "--data", str(data), "--epochs", "1",
                         "--image-size", "32", "--runs-dir", "runs", "--run-name", "r", env=ENV, cwd=a)
    assert res.returncode == 0, res.stderr
    assert (a / "calls.txt").read_text().splitlines() == ["called"]
    assert "UserWarning" not in res.stderr, res.stderr[:2000]
    meta = json.loads((a / "runs" / "r" / "model.json").read_text())
    assert meta["model"] == "mybuild:build" and Path(meta["module_dir"]) == a.resolve()

    b = tmp_path / "B"
    b.mkdir()
    out = run_subprocess("predict", str(a / "runs" / "r"), "--data", str(data / "cat"), env=ENV, cwd=b)
    assert out.returncode == 0, out.stderr
    assert len([line for line in out.stdout.splitlines() if line.strip()]) == 1 + 6  # the header and one a row

    shutil.move(str(a / "mybuild.py"), str(tmp_path / "elsewhere.py"))  # the module is gone
    gone = run_subprocess("predict", str(a / "runs" / "r"), "--data", str(data / "cat"), env=ENV, cwd=b)
    assert gone.returncode == 2 and "Traceback" not in gone.stderr
    lines = [line for line in gone.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "module 'mybuild' is not importable from here" in lines[0], gone.stderr


def test_each_run_of_one_process_builds_its_own_model() -> None:
    import torch

    from fasttrain.models.given_model import built_once
    calls: list[int] = []

    def build() -> torch.nn.Module:
        calls.append(1)
        return torch.nn.Linear(2, 2)

    key = ("test:build", 2, None)
    with torch.device("meta"):
        counted = built_once(key, build, for_run=False)  # a forecast counting it on meta
    trial = built_once(key, build, for_run=False)
    run = built_once(key, build, for_run=True)
    assert counted.weight.device.type == "meta" and run.weight.device.type == "cpu" and len(calls) == 1
    assert torch.equal(trial.weight, run.weight) and trial.weight is not run.weight
    assert built_once(key, build, for_run=True) is not run and len(calls) == 2  # the next run: a new model
