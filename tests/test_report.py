"""The run's report (issue 41): report.html written by every run (one epoch, stopped mid-epoch, resumed), offline,
with at least 5 plots; `fasttrain report` over one run, several (one page with every run's curves), --png, bad input;
a run without matplotlib says once how to get the report; the Python API; headless Chromium renders the page.

Real child processes train tiny_cnn at 16 px on real PNG files (tests/loop_helpers.py); the stop lands right after
optimizer step 8 (epoch 2, batch 2) through FASTTRAIN_TEST_SIGNAL_AT_STEP, then `--resume` finishes the run.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import one_error_line, run_subprocess
from loop_helpers import DETERMINISTIC_PROFILE, tiny_run_folder, write_image_folder

ENV = {"OMP_NUM_THREADS": "1"}
BASE = ("--profile", "tiny.yaml", "--data", "data", "--model", "tiny_cnn", "--no-tune")
IMG = re.compile(r'<img [^>]*src="data:image/png;base64,')


def _train(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    proc = run_subprocess("train", *args, env={**ENV, **(env or {})}, cwd=root, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(autouse=True)
def _runs_draw_their_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite turns the report off for every other test's runs (conftest.NO_REPORT); these draw it."""
    monkeypatch.delenv("FASTTRAIN_NO_REPORT", raising=False)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """runs/one (1 epoch), runs/stopped (SIGTERM in epoch 2: a copy of the folder at the stop), runs/cut (the same
    run stopped, then resumed to its end)."""
    root = tiny_run_folder(tmp_path_factory.mktemp("report"))  # 6 steps of 4 an epoch
    _train(root, *BASE, "--epochs", "1", "--run-name", "one")
    cut = _train(root, *BASE, "--epochs", "2", "--run-name", "cut", env={"FASTTRAIN_TEST_SIGNAL_AT_STEP": "8"})
    assert "stopped by SIGTERM after optimizer step 8 (epoch 2, batch 2)" in cut.stderr
    shutil.copytree(root / "runs" / "cut", root / "runs" / "stopped")
    _train(root, "--resume", "runs/cut")
    return root


def _page(run: Path) -> str:
    return (run / "report.html").read_text(encoding="utf-8")


def _offline(html: str) -> None:
    assert "http://" not in html and "https://" not in html
    assert "<script" not in html and "url(" not in html  # nothing fetched, nothing run


# -- what a run leaves -------------------------------------------------------------------------------------------
def test_a_step_row_records_the_memory_and_the_limit_it_is_held_against(work: Path) -> None:
    rows = [json.loads(line) for line in (work / "runs" / "one" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if r["kind"] == "step"]
    assert steps and all(r["process_rss_bytes"] > 10_000_000 for r in steps)
    assert all(r["host_ram_total_bytes"] > r["process_rss_bytes"] for r in steps)


def test_the_summary_keeps_the_best_epochs_confusion_matrix(work: Path) -> None:
    from fasttrain.report import gather_run
    summary = gather_run(work / "runs" / "one").summary  # summary.json read back
    matrix = summary.confusion_matrix
    assert matrix is not None and summary.per_class is not None
    assert len(matrix) == 3 and all(len(row) == 3 for row in matrix)
    assert sum(map(sum, matrix)) == 12
    assert [sum(row) for row in matrix] == [c.images for c in summary.per_class]


# runs/stopped is runs/cut's folder as the stop left it: its page was written as cut's
@pytest.mark.parametrize("name, title, words", [("one", "one", "finished after 1 epoch"),
                                                ("stopped", "cut", "stopped by SIGTERM at epoch 2, batch 2"),
                                                ("cut", "cut", "finished after 2 epochs; resumed at")])
def test_every_run_writes_an_offline_report_with_its_plots(work: Path, name: str, title: str, words: str) -> None:
    html = _page(work / "runs" / name)
    assert len(IMG.findall(html)) >= 5
    _offline(html)
    assert words in html and f"<title>fasttrain report: {title}" in html
    for heading in ("Accuracy and loss", "Learning rate", "Speed", "Memory", "Classes", "Plan", "Summary"):
        assert f">{heading}" in html, heading
    assert "class0" in html and "tiny_cnn" in html


def test_the_resumed_runs_steps_read_one_clock_across_the_stop(work: Path) -> None:
    from fasttrain.report import gather_run
    from fasttrain.report.series import step_series
    run = gather_run(work / "runs" / "cut")
    clock = step_series(run).clock_s
    assert len(clock) == len(run.steps) and clock == sorted(clock)
    last = run.epochs[-1].elapsed_s
    assert last is not None and clock[-1] <= last + 0.5  # the last step before the last epoch's end


# -- the step clock, on fixed rows -------------------------------------------------------------------------------
def _rows(times: list[float], epochs: dict[int, tuple[float, float]]) -> list[dict[str, float]]:
    rows: list[dict[str, float]] = []
    for i, t in enumerate(times):
        rows.append({"kind": "step", "time": t, "step": i + 1})
        if i in epochs:
            t_end, elapsed = epochs[i]
            rows.append({"kind": "epoch", "time": t_end, "elapsed_s": elapsed, "epoch": len(rows)})
    return rows


def test_a_stop_between_two_epochs_rows_splits_at_the_restart() -> None:
    from fasttrain.report.series import step_clock
    # process 1: launched at 100 (clock 0), steps at 101..104, epoch 1 ends at 105 (clock 5); steps at 106, 107,
    # stop. Process 2 launched at 200 resumes at clock 7: steps at 203, 204, epoch 2 ends at 205 (clock 12).
    rows = _rows([101, 102, 103, 104, 106, 107, 203, 204], {3: (105, 5.0), 7: (205, 12.0)})
    assert step_clock(rows, resumed_before_s=7.0) == pytest.approx([1, 2, 3, 4, 6, 7, 10, 11])


def test_a_stop_before_the_first_epoch_row_uses_the_clock_at_the_resume() -> None:
    from fasttrain.report.series import step_clock
    rows = _rows([101, 102, 203, 204], {3: (205, 8.0)})  # stopped at clock 2, resumed at 200 (clock 2 again)
    clock = step_clock(rows, resumed_before_s=2.0)
    assert clock == sorted(clock) and clock[:2] == pytest.approx([1, 2]) and clock[2:] == pytest.approx([6, 7])


def test_steps_without_any_epoch_row_count_from_the_first_step() -> None:
    from fasttrain.report.series import step_clock
    assert step_clock(_rows([50, 51.5, 53], {}), resumed_before_s=None) == pytest.approx([0, 1.5, 3])


# -- the command -------------------------------------------------------------------------------------------------
def test_report_rewrites_one_runs_page(cli, work: Path, tmp_path: Path) -> None:
    run = tmp_path / "one"
    shutil.copytree(work / "runs" / "one", run)
    (run / "report.html").unlink()
    result = cli("report", str(run))
    assert result.code == 0, result.err
    assert str(run / "report.html") in result.err
    assert len(IMG.findall(_page(run))) >= 5


def test_report_of_two_runs_writes_one_page_with_both_runs_curves(cli, work: Path, tmp_path: Path) -> None:
    out = tmp_path / "both.html"
    result = cli("report", str(work / "runs" / "one"), str(work / "runs" / "cut"), "--out", str(out))
    assert result.code == 0, result.err
    html = out.read_text(encoding="utf-8")
    _offline(html)
    assert len(IMG.findall(html)) >= 3 and "one (tiny.yaml, tiny_cnn)" in html and "cut (tiny.yaml, tiny_cnn)" in html

    from fasttrain.report import gather_run
    from fasttrain.report.overlay import overlay_figures
    figures = overlay_figures([gather_run(work / "runs" / "one"), gather_run(work / "runs" / "cut")])
    assert list(figures) == ["accuracy-time", "accuracy-epoch", "speed"]
    for figure in figures.values():  # each run's own curve on every plot, not one run's twice
        curves = {line.get_label(): line.get_xydata().tolist() for ax in figure.axes for line in ax.get_lines()}
        one, cut = curves["one (tiny.yaml, tiny_cnn)"], curves["cut (tiny.yaml, tiny_cnn)"]
        assert one and cut and one != cut


def test_report_png_writes_each_plot_as_a_png(cli, work: Path, tmp_path: Path) -> None:
    from PIL import Image
    result = cli("report", str(work / "runs" / "stopped"), "--out", str(tmp_path / "r.html"), "--png",
                 str(tmp_path / "png"))
    assert result.code == 0, result.err
    files = sorted((tmp_path / "png").glob("*.png"))
    assert len(files) >= 5 and all(f.name.startswith("stopped-") for f in files)
    for f in files:
        with Image.open(f) as image:
            assert image.size[0] > 300 and len(set(image.convert("L").get_flattened_data())) > 2


def test_bad_input_is_exit_2_one_line_per_problem(cli, work: Path, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    one_error_line(cli("report", str(tmp_path / "empty")), "not a run folder", "summary.json")
    one_error_line(cli("report", str(tmp_path / "nowhere")), "does not exist")
    (tmp_path / "file").write_text("x")
    one_error_line(cli("report", str(work / "runs" / "one"), "--out", str(tmp_path / "file" / "r.html")), "--out")
    both = cli("report", str(tmp_path / "empty"), str(tmp_path / "nowhere"))
    assert both.code == 2 and len([ln for ln in both.err.splitlines() if "error:" in ln]) == 2


def test_report_without_matplotlib_says_how_to_get_it(cli, work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    one_error_line(cli("report", str(work / "runs" / "one")), "matplotlib", "pip install 'fasttrain[report]'")


# -- a run without matplotlib, a report that cannot be drawn ---------------------------------------------------
def _train_in_process(cli, root: Path, name: str):
    write_image_folder(root / "data", train_per_class=4, val_per_class=2)
    (root / "tiny.yaml").write_text(DETERMINISTIC_PROFILE)
    return cli("train", "--profile", str(root / "tiny.yaml"), "--data", str(root / "data"), "--model", "tiny_cnn",
               "--epochs", "1", "--no-tune", "--runs-dir", str(root / "runs"), "--run-name", name)


def test_a_run_without_matplotlib_says_once_how_to_get_the_report(cli, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = _train_in_process(cli, tmp_path, "plain")
    assert result.code == 0, result.err
    assert (result.out + result.err).count("pip install 'fasttrain[report]'") == 1
    assert (tmp_path / "runs" / "plain" / "summary.json").exists()
    assert not (tmp_path / "runs" / "plain" / "report.html").exists()


def test_a_report_that_fails_to_draw_warns_once_and_the_run_succeeds(cli, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from fasttrain.report import page

    def broken(*args: object, **kwargs: object) -> str:
        raise ValueError("a plot could not be drawn")
    monkeypatch.setattr(page, "run_page", broken)
    result = _train_in_process(cli, tmp_path, "broken")
    assert result.code == 0, result.err
    warnings = [ln for ln in (result.out + result.err).splitlines() if "report" in ln and "warning" in ln]
    assert len(warnings) == 1 and "a plot could not be drawn" in warnings[0], warnings
    assert (tmp_path / "runs" / "broken" / "summary.json").exists()


# -- Python ------------------------------------------------------------------------------------------------------
def test_fasttrain_report_and_the_runs_result_show_the_plots_in_a_notebook(work: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import fasttrain
    monkeypatch.chdir(work)  # the summary's run_dir is relative to where the run was started
    from fasttrain.api.results import RunSummary
    shown = fasttrain.report(work / "runs" / "one")
    assert len(IMG.findall(shown._repr_html_())) >= 5 and shown.path is None
    both = fasttrain.report(work / "runs" / "one", work / "runs" / "cut", out=tmp_path / "both.html")
    assert both.path == tmp_path / "both.html" and "cut (tiny.yaml, tiny_cnn)" in both.path.read_text()
    summary = RunSummary(json.loads((work / "runs" / "one" / "summary.json").read_text()))
    html = summary._repr_html_()
    assert "epoch" in html and len(IMG.findall(html)) >= 5
    assert "<img" not in str(summary) and repr(summary).startswith("RunSummary(")  # a terminal: text as before


# -- a real browser ----------------------------------------------------------------------------------------------
def test_headless_chromium_renders_the_page_not_blank(work: Path, tmp_path: Path) -> None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    from PIL import Image
    shot = tmp_path / "shot.png"
    proc = subprocess.run([browser, "--headless", "--disable-gpu", "--no-sandbox", f"--screenshot={shot}",
                           "--window-size=1200,3000", f"--user-data-dir={tmp_path / 'profile'}",
                           (work / "runs" / "cut" / "report.html").as_uri()],
                          check=False, capture_output=True, text=True, timeout=120)
    assert shot.exists(), proc.stderr[-2000:]
    with Image.open(shot) as image:
        grey = image.convert("L")
        pixels = list(grey.get_flattened_data())
    assert grey.size == (1200, 3000)
    dark = sum(1 for p in pixels if p < 200) / len(pixels)
    assert len(set(pixels)) > 20 and dark > 0.01, (len(set(pixels)), dark)
