"""A loss that runs away is a failed run (exit 1, one line), not a success (issue 25, point 3).

The rule (train/loop/divergence.py) on recorded loss series, then a real run through the CLI whose loss climbs."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fasttrain.core.errors import JobFailed
from fasttrain.train.loop.divergence import check, runaway
from fasttrain.train.loop.epoch_row import EpochRow


def _rows(train: list[float], val: list[float] | None = None) -> list[EpochRow]:
    return [EpochRow(epoch=i + 1, train_loss=t, val_loss=val[i] if val else None) for i, t in enumerate(train)]


# Recorded here: the run (3 classes), and healthy or merely noisy runs of this machine's tests.
DIVERGED = {
    "issue 25: 5.4 -> 14.8, val 2,014 -> 481,525": ([5.4, 14.8], [2014.0, 481525.0]),
    "climbs after a good start": ([1.1, 0.6, 0.9, 3.7], [1.0, 0.7, 1.5, 9.0]),
}
HEALTHY = {
    "adamw lr 3 on 3 colours (falls)": ([7.168, 0.1728, 6.417e-05, 5.08e-05], [23.01, 0.0002198, 4.033e-05, 2.748e-05]),
    "noise near zero": ([1.0, 0.01, 0.03], None),
    "val loss swings near zero, train falls": ([0.403, 0.06705, 0.02192, 0.004791],
                                               [0.1357, 1.123e-05, 0.03024, 0.6189]),
    "val loss jumps at chance, train falls": ([1.634, 0.3982], [0.0, 222.1]),
    "a warm-up bump below the start": ([2.3, 1.2, 2.0], None),
    "one epoch": ([5.4], [2014.0]),
    "nan is the guard's, not this rule's": ([1.0, float("nan")], None),
}


@pytest.mark.parametrize("case", list(DIVERGED))
def test_runaway_losses_are_named(case: str) -> None:
    train, val = DIVERGED[case]
    why = runaway(_rows(train, val))
    assert why is not None and "train loss" in why
    assert "val loss" in why


@pytest.mark.parametrize("case", list(HEALTHY))
def test_healthy_or_noisy_losses_pass(case: str) -> None:
    train, val = HEALTHY[case]
    assert runaway(_rows(train, val)) is None


def test_check_raises_a_job_failure_naming_the_checkpoint() -> None:
    with pytest.raises(JobFailed, match=r"diverged: train loss 5.4 \(epoch 1\) -> 14.8 \(epoch 2\), 2.7x.*last.pt"):
        check(_rows([5.4, 14.8]), Path("runs/x/last.pt"))
    check(_rows([5.4, 1.0]), None)


def test_a_run_whose_loss_climbs_exits_1_with_one_line(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A real run whose model's output grows with every optimizer step (a learned scale that the loss cannot
    shrink fast enough): the train loss climbs from epoch to epoch, finite all along."""
    from loop_helpers import TINY_PROFILE, write_image_folder
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "climbing_model.py").write_text(textwrap.dedent("""
        import torch

        class Climbing(torch.nn.Module):
            '''Logits that favour the wrong class more after each step: every forward bumps a step counter.'''
            def __init__(self, num_classes=3):
                super().__init__()
                self.head = torch.nn.Linear(3, num_classes)
                self.register_buffer("steps", torch.zeros(()))
            def forward(self, x):
                if self.training:
                    self.steps += 1
                wrong = torch.zeros(x.shape[0], self.head.out_features, device=x.device)
                wrong[:, 0] = 1.0
                return self.head(x.mean(dim=(2, 3))) * 0 + wrong * self.steps

        def build(num_classes=3, **kwargs):
            return Climbing(num_classes)
    """))
    data = write_image_folder(tmp_path / "data", classes=3, train_per_class=8, val_per_class=4)
    profile = tmp_path / "tiny.yaml"
    profile.write_text(TINY_PROFILE.replace("epochs: 2", "epochs: 4") + "speed:\n  compile: false\n")
    result = cli("train", "--profile", str(profile), "--data", str(data), "--model", "climbing_model:build",
                 "--runs-dir", str(tmp_path / "runs"), "--no-tune", "--quiet")
    assert result.code == 1, (result.out, result.err)
    lines = [ln for ln in result.err.splitlines() if ln.startswith("fasttrain: failed:")]
    assert len(lines) == 1 and "diverged" in lines[0] and "train loss" in lines[0], result.err
    assert "Traceback" not in result.err
