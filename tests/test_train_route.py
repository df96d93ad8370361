"""The road from `fasttrain train` to `.backward()`: the command, then at most six files of the package on the call
stack from the training job it shares with fasttrain.train() (docs/architecture.md draws them), measured on a real
run, not read off the source."""
from __future__ import annotations

import traceback
from pathlib import Path

import pytest
import torch
from loop_helpers import write_image_folder

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "fasttrain"
MAX_FILES = 6


def test_train_reaches_backward_through_at_most_six_files(cli, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    stacks: list[list[str]] = []
    real_backward = torch.Tensor.backward

    def backward(self: torch.Tensor, *args: object, **kwargs: object) -> None:
        stack = [frame.filename for frame in traceback.extract_stack()]
        if not stacks and any(name.endswith("train/loop/trainer.py") for name in stack):  # a training step's
            stacks.append(stack)  # (not a meta-device check's, which prepare runs to count the model's cost)
        real_backward(self, *args, **kwargs)  # type: ignore[arg-type]

    data = write_image_folder(tmp_path / "data")
    monkeypatch.setattr(torch.Tensor, "backward", backward)
    monkeypatch.chdir(tmp_path)
    res = cli("train", "--data", str(data), "--model", "tiny_cnn", "--image-size", "16", "--epochs", "1",
              "--no-tune", "--quiet", "--set", "loader.batch_size=4", "--set", "speed.compile=false")
    assert res.code == 0, res.err
    assert stacks, "no training backward seen"
    files: list[str] = []
    for name in stacks[0]:
        path = Path(name).resolve()
        if PACKAGE in path.parents and str(path.relative_to(PACKAGE)) not in files:
            files.append(str(path.relative_to(PACKAGE)))
    job = files.index("report/train_job.py")  # the job `fasttrain train` and fasttrain.train() both call
    assert files[job - 1] == "commands/train.py", files  # the command: flags parsed, the job called
    route = files[job:]
    assert route[-1] == "train/loop/precision.py" and len(route) <= MAX_FILES, route
