"""The screens of a real `fasttrain` in a pseudo-terminal of 80x24, read back through a terminal emulator (pyte):
what a person at such a terminal sees and what stays in the scrollback (issue 25)."""
from __future__ import annotations

import re

import pytest

pytest.importorskip("pyte", reason="pyte (dev extra) emulates the terminal")

from loop_helpers import TINY_PROFILE, write_image_folder
from pty_helpers import run_in_pty


@pytest.fixture(scope="module")
def twelve_epochs(tmp_path_factory: pytest.TempPathFactory):
    """One 12-epoch run on a tiny real image folder at 80x24, shared by the checks of its screen."""
    root = tmp_path_factory.mktemp("pty12")
    data = write_image_folder(root / "data", classes=3, train_per_class=8, val_per_class=4)
    profile = root / "tiny.yaml"
    # precise_bn_images 0: the re-estimate holds up to 256 images across these 24-image epochs (64 forwards at
    # batch 4 before each validation by epoch 11, ~8 s of the suite's time); the screen is what is checked here
    profile.write_text(TINY_PROFILE.replace("epochs: 2", "epochs: 12") + "  precise_bn_images: 0\n")
    term = run_in_pty("train", "--profile", str(profile), "--data", str(data), "--model", "tiny_cnn",
                      "--runs-dir", str(root / "runs"), "--no-tune", cwd=root)
    assert term.code == 0, term.text()[-3000:]
    return term


def test_every_epoch_is_one_line_in_the_scrollback_and_the_newest_is_kept(twelve_epochs) -> None:
    """At 80x24 the live table showed epochs 1-4 then `...`, and the final table only the last 8 epochs."""
    lines = twelve_epochs.lines
    for n in range(1, 13):
        found = [ln for ln in lines if ln.startswith(f"epoch {n}/12 |")]
        assert len(found) == 1, (n, found)
        assert "train loss" in found[0] and "acc@1" in found[0] and len(found[0]) <= 80
    assert not any(ln.strip() in ("...", "…") for ln in lines), "a screen cut by the terminal's height"
    epoch_rows = [i for i, ln in enumerate(lines) if re.match(r"epoch \d+/12 \|", ln)]
    assert epoch_rows == sorted(epoch_rows)  # in order, oldest first


def test_the_live_screen_shows_the_elapsed_time(twelve_epochs) -> None:
    assert re.search(r"elapsed \d:\d\d:\d\d", twelve_epochs.text())


PRESETS = ("aws-a10g", "cpu", "gcp-v100", "kaggle-t4", "laptop-4060")


def test_profiles_list_keeps_what_users_type_whole_at_80_columns() -> None:
    """`kaggle-…` and `fp16-mi…` at 80 columns."""
    term = run_in_pty("profiles", "list")
    assert term.code == 0
    assert "…" not in term.text()
    assert all(len(line) <= 80 for line in term.lines)
    for name in PRESETS:
        assert any(line.startswith(f"│ {name} ") for line in term.lines), name
    assert sum("fp16-mixed" in line for line in term.lines) == 4


def test_doctor_title_and_findings_are_not_cut_at_80_columns() -> None:
    term = run_in_pty("doctor", "--profile", "cpu", "--all")  # the panels (the default: tests/test_doctor_brief.py)
    assert term.code in (0, 1)
    assert "…" not in term.text() and "findings (profile cpu)" in term.text()


def test_train_help_reads_at_80_columns() -> None:
    """Descriptions wrapped to ~23 characters, a metavar split mid-word, `--set <list[str]>`."""
    term = run_in_pty("train", "--help")
    text = term.text()
    assert term.code == 0 and "<list[str]>" not in text and "--set KEY=VALUE" in text
    assert "-d, --data DIR|shapes|synthetic|module:callable" in text  # the metavar whole, on one line
    assert "Preset name or profile YAML; default: the" in text  # a description line of readable length
