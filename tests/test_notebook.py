"""fasttrain in a notebook: a process started from a notebook cell (`!fasttrain train`) prints plain lines."""
from __future__ import annotations

import pytest


def test_a_process_started_from_a_notebook_cell_prints_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """`!fasttrain train` in a cell: a pseudo-terminal (isatty), but the notebook shows no redraw in place."""
    import io

    from fasttrain.commands.train import _dashboard
    from fasttrain.train.events import RunDisplay
    from loop_helpers import cpu_plan

    class Pty(io.StringIO):
        def isatty(self) -> bool:
            return True

    plan, _ = cpu_plan()
    spec = RunDisplay(plan, total_batches=10, epochs=1, stream=Pty(), report=None, telemetry=None, forecast=None,
                      quiet=False, plain=False)
    for name in ("JPY_PARENT_PID", "MPLBACKEND"):
        monkeypatch.delenv(name, raising=False)
    assert _dashboard(spec).mode == "live"
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")  # what ipykernel sets
    assert _dashboard(spec).mode == "plain"
    monkeypatch.delenv("MPLBACKEND")
    monkeypatch.setenv("JPY_PARENT_PID", "4242")  # what jupyter_client sets for the kernel
    assert _dashboard(spec).mode == "plain"
