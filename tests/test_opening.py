"""What a run says before its first step (issue 25, points 8 and 4): what the user must know, not ten notes; every
note under --verbose and in summary.json; no `None` in a note."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from loop_helpers import TINY_PROFILE, write_image_folder

from fasttrain.train.setup.plan_view import must_know


def _run(cli, tmp_path: Path, *extra: str):
    data = write_image_folder(tmp_path / "data", classes=3, train_per_class=8, val_per_class=4)
    profile = tmp_path / "tiny.yaml"
    profile.write_text(TINY_PROFILE)  # extends cpu: bf16-mixed is the preset's own choice
    result = cli("train", "--profile", str(profile), "--data", str(data), "--model", "tiny_cnn", "--epochs", "1",
                 "--runs-dir", str(tmp_path / "runs"), "--run-name", "r", "--no-tune", *extra)
    assert result.code == 0, result.err
    return result, json.loads((tmp_path / "runs" / "r" / "summary.json").read_text())


def _opening(out: str) -> list[str]:
    lines = out.splitlines()[1:]  # after the run's header line
    end = next(i for i, ln in enumerate(lines) if ln.startswith(("epoch ", "verdict:")))
    return lines[:end]


def test_the_opening_says_only_what_the_user_must_know(cli, tmp_path: Path, all_cores: None) -> None:
    result, summary = _run(cli, tmp_path)
    opening = _opening(result.out)
    assert len(opening) <= 2, opening
    assert not any("mixed precision asked on a machine without a GPU" in ln for ln in opening)  # the preset's choice
    assert not any(
        ln.startswith(("note: CPU allocator", "note: CPU compute threads", "note: input:")) for ln in opening
    )
    kept = " ".join(summary["plan_notes"] + summary["notes"])
    assert "mixed precision asked" in kept and "CPU compute threads" in kept and "CPU allocator" in kept


def test_verbose_shows_every_note(cli, tmp_path: Path, all_cores: None) -> None:
    result, _ = _run(cli, tmp_path, "--verbose")
    opening = " ".join(_opening(result.out))
    for needle in ("mixed precision asked", "CPU compute threads", "CPU allocator", "tuning: skipped"):
        assert needle in opening, needle


@pytest.mark.parametrize(
    "note,shown",
    [
        ("note: CPU allocator: freed tensor memory kept", False),
        ("input: the 36 images are decoded once into RAM", False),
        ("augment: validation sees the whole image (val_crop_pct 1.0, not 0.875): the images are 16 px", False),
        ("torch.compile failed (CppCompileError); training eager instead", True),
        ("speed.precision: fp16 on a CPU falls back to fp32", True),
    ],
)
def test_must_know(note: str, shown: bool) -> None:
    assert must_know(note) is shown


def test_notes_show_auto_not_none() -> None:
    from fasttrain.train.trial.choice import tuning_line

    line = tuning_line({"date": "2026-11-25", "spent_s": 5.5, "choice": {"cpu_threads": None, "workers": 0}})
    assert "None" not in line and "cpu_threads=auto" in line
    # a choice the first steps' A/B of an earlier run cached (no trial: no date or seconds of one)
    cached = tuning_line(
        {
            "cached": True,
            "choice": {"precision": "fp32"},
            "measurements": [{"setting": "precision", "value": "fp32", "date": "2026-11-26"}],
        }
    )
    assert cached == ("measured 2026-11-26 in an earlier run's first steps (cached: no trial this run): precision=fp32")
