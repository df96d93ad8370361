"""A user's first notebook cell prints no warning (issue 43 item 3): `fasttrain.train("resnet18", ...)` in a real
Jupyter kernel (nbclient + ipykernel) without ipywidgets printed a red `TqdmWarning: IProgress not found` on stderr:
timm imports huggingface_hub, which imports tqdm.auto, which warns in a kernel that has no widgets."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, child_env
from loop_helpers import write_image_folder

CELL = """\
import fasttrain
summary = fasttrain.train("resnet18", {data!r}, epochs=1, image_size=16, batch_size=4, no_tune=True,
                          runs_dir={runs!r}, run_name="first")
print("acc", summary.best_val_acc1 is not None)"""


def _stderr_and_stdout(cell: Any) -> tuple[str, str]:
    streams = [o for o in cell.outputs if o.output_type == "stream"]
    return ("".join(o.text for o in streams if o.name == "stderr"),
            "".join(o.text for o in streams if o.name == "stdout"))


@pytest.mark.timeout(300)
def test_the_first_train_call_in_a_kernel_without_widgets_prints_no_warning(tmp_path: Path) -> None:
    pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    import nbformat
    from nbclient import NotebookClient

    data = write_image_folder(tmp_path / "data", classes=3, train_per_class=8, val_per_class=4)
    widgets = "import importlib.util\nprint('ipywidgets', importlib.util.find_spec('ipywidgets') is not None)"
    cells = [widgets, CELL.format(data=str(data), runs=str(tmp_path / "runs"))]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    env = child_env({"PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
                     "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
                     "OMP_NUM_THREADS": "1"})
    NotebookClient(nb, timeout=240, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)
    _, found = _stderr_and_stdout(nb.cells[0])
    if "ipywidgets True" in found:
        pytest.skip("ipywidgets is installed here: tqdm draws widgets and has nothing to warn about")
    err, out = _stderr_and_stdout(nb.cells[1])
    assert "acc True" in out, (out, err)
    assert "Warning" not in err and "IProgress" not in err, err
    assert (tmp_path / "runs" / "first" / "summary.json").exists()
