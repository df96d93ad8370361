"""Off a terminal (a pipe, a file, CI, a notebook's captured stream) the run prints readable plain lines: a progress
line every few seconds, one line per epoch, the verdict only when it changes (issue 25, point 7)."""
from __future__ import annotations

import itertools
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
    assert all(a != b for a, b in itertools.pairwise(kinds)), verdicts  # said again only when it changes


def test_off_a_terminal_the_width_follows_columns(tmp_path: Path) -> None:
    """Off a terminal the width was fixed at 120 whatever COLUMNS said."""
    wide = run_subprocess("profiles", "list", cwd=tmp_path)
    narrow = run_subprocess("profiles", "list", env={"COLUMNS": "80"}, cwd=tmp_path)
    assert wide.returncode == narrow.returncode == 0
    assert max(len(line) for line in wide.stdout.splitlines()) > 80
    table = [line for line in narrow.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert table and max(len(line) for line in table) <= 80 and "…" not in narrow.stdout
    assert "kaggle-t4" in narrow.stdout and "laptop-4060" in narrow.stdout


def test_bench_loader_leaves_columns_out_rather_than_cut_them() -> None:
    from fasttrain.bench.view import LOADER_DROP_ORDER, fitting_columns
    headers = ["workers", "prefetch", "images/s", "range", "", "RAM (PSS)", "RSS sum", "start-up", ""]
    rows = [["2", "2", "1234", "1200-1300", "█" * 16, "812 MiB", "1.2 GiB", "0.41 s", "knee, recommended"]]
    assert fitting_columns(headers, rows, 200, LOADER_DROP_ORDER) == list(range(9))
    kept = fitting_columns(headers, rows, 80, LOADER_DROP_ORDER)
    assert 8 in kept and 0 in kept and 2 in kept and 4 not in kept
    needed = sum(max(len(rows[0][i]), *(len(w) for w in headers[i].split()), 1) + 3 for i in kept) + 1
    assert needed <= 80
