"""Shared test fixtures: a clean environment and a CLI runner that returns exit code and output."""
from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
GPU_SKIP_REASON = "needs a CUDA GPU (torch.cuda.is_available() is False)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test marked `gpu` is skipped, with the reason, where torch sees no CUDA device (docs/gpu.md)."""
    marked = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not marked:
        return
    import torch
    if torch.cuda.is_available():
        return
    for item in marked:
        item.add_marker(pytest.mark.skip(reason=GPU_SKIP_REASON))


# pytest-xdist's workers run with COLUMNS=80; output off a terminal follows COLUMNS (core/console.py), so a test
# that wants a width says so, and none inherits the runner's.
TERMINAL_SIZE_VARS = ("COLUMNS", "LINES")
NO_REPORT = "FASTTRAIN_NO_REPORT"  # set: a run writes no report.html (src/fasttrain/report/after_run.py)
FIXED_THREADS = "FASTTRAIN_TEST_FIXED_THREADS"  # set: runs keep their threads (train/trial/thread_follow.py)


# One compute thread in every test process and its children: the suite's xdist workers share the machine's cores,
# and a run with every core's OpenMP threads beside another worker's spins at its barriers (issue 42 item 3: a
# 50x loss measured). In-process runs took the cores' count (models/setup.configure_backends, without
# OMP_NUM_THREADS), which cost ~6 of the suite's ~21 CPU minutes on 2 cores. It is set before torch reads it,
# children inherit it (child_env), and a test of the thread choice itself clears it (the `all_cores` fixture).
os.environ["OMP_NUM_THREADS"] = "1"


@pytest.fixture(autouse=True)
def _one_compute_thread() -> Iterator[None]:
    """Each test starts and ends at one torch thread, whatever a test before it set (a thread choice under test,
    torch.set_num_threads in a tuning trial)."""
    yield
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


@pytest.fixture
def all_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """For a test of what a run decides about its threads without OMP_NUM_THREADS, as a user's runs do."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)


@pytest.fixture(autouse=True)
def _clean_fasttrain_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test sees the developer's FASTTRAIN_* overrides, nor the runner's terminal size."""
    for name in list(os.environ):
        if (name.startswith("FASTTRAIN_") and name != "FASTTRAIN_CACHE") or name in TERMINAL_SIZE_VARS:
            monkeypatch.delenv(name, raising=False)
    # The suite's hundreds of runs draw no report.html (about 1.2 s each); tests/test_report.py draws them.
    monkeypatch.setenv(NO_REPORT, "1")
    # Runs beside the other xdist worker would give compute threads up at moments that depend on the other tests
    # (train/trial/thread_follow.py); tests/test_thread_follow.py turns it back on.
    monkeypatch.setenv(FIXED_THREADS, "1")


@pytest.fixture(scope="session", autouse=True)
def _shared_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Generated data (the shapes set) goes to one temp cache per test session, never to ~/.cache."""
    if "FASTTRAIN_CACHE" not in os.environ:
        os.environ["FASTTRAIN_CACHE"] = str(tmp_path_factory.mktemp("fasttrain-cache"))


@pytest.fixture(autouse=True)
def _no_measurements_from_other_tests(_shared_cache: None) -> None:
    """The measurement cache (tuning.json: trials, bench loader/speedups figures) changes plans and advice, so
    each test starts without one: no test depends on which tests ran before it in the same worker."""
    from fasttrain.tuning.store import cache_path
    cache_path(Path(os.environ["FASTTRAIN_CACHE"])).unlink(missing_ok=True)


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]):
    """Run `fasttrain ARGS` in-process through the real entry point (exit codes included)."""
    from fasttrain.cli import main

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        code = main(list(args))
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without FASTTRAIN_* settings (the shared cache stays) and the terminal size, plus `extra`:
    for real children."""
    env = {k: v for k, v in os.environ.items()
           if (not k.startswith("FASTTRAIN_") or k in ("FASTTRAIN_CACHE", NO_REPORT, FIXED_THREADS))
           and k not in TERMINAL_SIZE_VARS}
    env.update(extra or {})
    return env


def run_subprocess(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
                   timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`python -m fasttrain ARGS` in a real child process."""
    return subprocess.run([sys.executable, "-m", "fasttrain", *args], capture_output=True, text=True,
                          env=child_env(env), cwd=cwd or REPO, timeout=timeout)


def one_error_line(result, *needles: str) -> str:
    """Exit 2, no traceback, exactly one `fasttrain: error:` line, holding each of `needles`; -> that line."""
    assert result.code == 2, (result.code, result.out, result.err)
    assert "Traceback" not in result.err + result.out
    lines = [ln for ln in result.err.splitlines() if ln.startswith("fasttrain: error:")]
    assert len(lines) == 1, result.err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
