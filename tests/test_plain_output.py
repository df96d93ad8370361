"""Off a terminal (a pipe, a file, CI, a notebook's captured stream) the run prints readable plain lines: a progress
line every few seconds, one line per epoch, the verdict only when it changes (issue 25, point 7)."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from conftest import run_subprocess
from loop_helpers import TINY_PROFILE, write_image_folder


def test_a_piped_12_epoch_run_repeats_no_line_more_than_twice(tmp_path: Path) -> None:
    data = write_image_folder(tmp_path / "data", classes=3, train_per_class=8, val_per_class=4)
    profile = tmp_path / "tiny.yaml"
    profile.write_text(TINY_PROFILE.replace("epochs: 2", "epochs: 12"))
    proc = run_subprocess("train", "--profile", str(profile), "--data", str(data), "--model", "tiny_cnn",
                          "--runs-dir", str(tmp_path / "runs"), "--no-tune", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    counts = Counter(lines)
    repeated = {ln: n for ln, n in counts.items() if n > 2}
    assert not repeated, repeated
    assert "\x1b[" not in proc.stdout  # no escape codes off a terminal
    epoch_lines = [ln for ln in lines if ln.startswith("epoch done:")]
    assert len(epoch_lines) == 12  # one line per epoch in the log
    verdicts = [ln for ln in lines if ln.startswith("verdict:")]
    kinds = [v.split(":")[1].strip() for v in verdicts]
    assert all(a != b for a, b in zip(kinds, kinds[1:])), verdicts  # said again only when it changes
