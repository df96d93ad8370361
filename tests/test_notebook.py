"""fasttrain in a notebook: docs/notebook.md's walk-through executed cell by cell in a real Jupyter kernel
(nbclient + ipykernel), and a process started from a notebook cell (`!fasttrain train`) printing plain lines.

The walk-through runs as written except for what a 2-core CPU box needs (SUBSTITUTIONS: the data folder becomes a
small real image tree, 10-epoch runs become 1-epoch ones); each substitution must still match the document, so an
edit of the document cannot silently skip a cell."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any, ClassVar

import pytest
from conftest import REPO, child_env
from loop_helpers import write_image_folder

DOC = REPO / "docs" / "notebook.md"
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
# text in the document -> what the kernel runs instead (with DATA: the image tree's path)
SUBSTITUTIONS = {
    'Path("/kaggle/input/flowers")': 'Path("{data}")',
    "epochs=10": "epochs=1",
    "epochs=12": "epochs=2",
    "--epochs 15": "--epochs 2",
}


def cells_of(text: str, data: Path) -> list[str]:
    """docs/notebook.md's python blocks, one cell each, with SUBSTITUTIONS applied (each must match)."""
    cells = PYTHON_BLOCK.findall(text)
    joined = "\n".join(cells)
    for old in SUBSTITUTIONS:
        assert old in joined, f"docs/notebook.md no longer contains {old!r}: update SUBSTITUTIONS"
    out = []
    for cell in cells:
        for old, new in SUBSTITUTIONS.items():
            cell = cell.replace(old, new.format(data=data))
        out.append(cell.rstrip("\n"))
    return out


def _client(nb: Any, cwd: Path) -> Any:
    """An nbclient client that also counts the display updates each cell's output received."""
    from nbclient import NotebookClient

    class Counting(NotebookClient):
        updates: ClassVar[dict[int, int]] = {}  # one count per client class: the test reads it after

        def process_message(self, msg: dict[str, Any], cell: Any, cell_index: int) -> Any:
            if msg["msg_type"] == "update_display_data":
                self.updates[cell_index] = self.updates.get(cell_index, 0) + 1
            return super().process_message(msg, cell, cell_index)

    return Counting(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}})


def _text(output: Any) -> str:
    return output.get("text") or output.get("data", {}).get("text/plain", "")


@pytest.mark.timeout(600)
def test_the_notebook_walkthrough_runs_in_a_real_kernel(tmp_path: Path) -> None:
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    import nbformat

    data = write_image_folder(tmp_path / "flowers", classes=3, train_per_class=40, val_per_class=8)
    work = tmp_path / "work"
    work.mkdir()
    light = "import sys, fasttrain\nassert 'torch' not in sys.modules, 'import fasttrain imported torch'"
    cells = [light, *cells_of(DOC.read_text(encoding="utf-8"), data)]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = _client(nb, work)
    env = child_env({"PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
                     "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
                     "OMP_NUM_THREADS": "1"})  # the suite's workers share the cores (as tests/test_docs_commands.py)
    client.execute(env=env)

    def cell(words: str) -> Any:
        return next(c for c in nb.cells if words in c.source)

    doctor = cell("fasttrain.doctor()").outputs
    assert any("text/html" in o.get("data", {}) and "findings" in _text(o) for o in doctor)
    forecast = cell("fasttrain.estimate(").outputs
    assert any("text/html" in o.get("data", {}) and "SmallNet" in _text(o) for o in forecast)

    train = cell("summary = fasttrain.train(net, (train_ds, val_ds), epochs=1")
    shown = [o for o in train.outputs if o.output_type == "display_data"]
    assert len(shown) == 1, [o.output_type for o in train.outputs]  # one output, redrawn in place
    assert client.updates.get(nb.cells.index(train), 0) >= 2
    final = _text(shown[0])
    assert "epoch 1/1" in final and "verdict:" in final and "summary" in final and "best acc@1" in final
    assert "<pre" in shown[0]["data"]["text/html"]

    table = cell("print(summary.best_val_acc1").outputs
    assert any(o.output_type == "execute_result" and "best acc@1" in o["data"].get("text/html", "")
               and "epoch 1/1" in o["data"].get("text/html", "") for o in table)  # the epoch lines, then the end

    resumed = "".join(_text(o) for o in cell("!fasttrain train --resume").outputs)
    assert "resumed from" in resumed and "Traceback" not in resumed, resumed[-2000:]
    assert "epoch done:" in resumed and "\x1b[1A" not in resumed  # plain lines: a cell's terminal shows no redraw
    cli_run = json.loads((work / "runs" / "flowers-resnet18" / "summary.json").read_text())
    assert cli_run["epochs_run"] == 2

    again = cell('resume="runs/smallnet"').outputs
    assert [_text(o) for o in again if o.output_type == "execute_result"] == ["2"]


def test_a_process_started_from_a_notebook_cell_prints_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """`!fasttrain train` in a cell: a pseudo-terminal (isatty), but the notebook shows no redraw in place."""
    import io

    from loop_helpers import cpu_plan

    from fasttrain.report.train_job import terminal_dashboard as _dashboard
    from fasttrain.train.loop.events import RunDisplay

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
