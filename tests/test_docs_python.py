"""Every ```python block of README.md and docs/*.md runs in a test, or is listed here with the reason it cannot.

docs/notebook.md's blocks are the cells of a notebook: tests/test_notebook.py runs them in a real Jupyter kernel.
The others run here in a real child process, in a temporary working directory, after SUBSTITUTIONS (a data folder
becomes a small real image tree, a 10-epoch run a 1-epoch one); each substitution must still match its document.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, child_env
from loop_helpers import write_image_folder

DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
PYTHON_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)
RUN_ELSEWHERE = {"docs/notebook.md": "the cells of a notebook: tests/test_notebook.py runs them in a Jupyter kernel",
                 "docs/train.md": "loading a trained model: tests/test_predict.py runs it on a real run's folder"}
# (file, first line of the block) -> why it cannot run as written
NOT_RUNNABLE = {
    ("docs/bench.md", "from fasttrain.profiles import presets"):
        "a fragment showing the order of the calls with the caller's own variables (ref, sets, report...)",
}
SUBSTITUTIONS = {"README.md": {'"/data/flowers"': '"{data}"', "epochs=10": "epochs=1"},
                 # the competition's folder is written into the working folder (competition_folder); a tiny model,
                 # one epoch; the submission comes from a run of the same block's own making
                 "docs/competition.md": {'"resnet18"': '"tiny_cnn"', "epochs=4": "epochs=1",
                                         '"runs/NAME"': 'fasttrain.train("tiny_cnn", "comp/train.csv", epochs=1, '
                                                        'quiet=True).run_dir'},
                 # a tiny model, one epoch; the two runs compared are the block's own and one more of the same data
                 "docs/report.md": {'"resnet18"': '"tiny_cnn"', '"data/"': '"{data}"', "epochs=5": "epochs=1",
                                    '"runs/scratch", "runs/finetuned"':
                                        'result.run_dir, fasttrain.train("tiny_cnn", "{data}", epochs=1, '
                                        'quiet=True).run_dir'}}
NEEDS_COMPETITION = {"docs/competition.md"}


def competition_folder(root: Path) -> Path:
    """docs/competition.md's folder: train.csv (`id,label`, ids without the extension) beside train_images/ (3 classes
    of real PNGs, 12 each), test_images/ (4) and sample_submission.csv."""
    from image_tree import write_png

    rows = []
    for c, name in enumerate(("Bag", "Coat", "Trouser")):
        for i in range(12):
            write_png(root / "train_images" / f"{c}x{i:03d}.png", seed=c * 100 + i, size=32)
            rows.append(f"{c}x{i:03d},{name}")
    for i in range(4):
        write_png(root / "test_images" / f"t{i}.png", seed=900 + i, size=32)
    (root / "train.csv").write_text("id,label\n" + "\n".join(rows) + "\n")
    (root / "sample_submission.csv").write_text("id,label\n" + "\n".join(f"t{i},Bag" for i in range(4)) + "\n")
    return root


def _blocks() -> list[tuple[str, str]]:
    return [(str(path.relative_to(REPO)), block) for path in DOC_FILES
            for block in PYTHON_BLOCK.findall(path.read_text(encoding="utf-8"))]


BLOCKS = _blocks()
RUNNABLE = [(f, b) for f, b in BLOCKS if f not in RUN_ELSEWHERE and (f, b.splitlines()[0]) not in NOT_RUNNABLE]


def test_every_python_block_runs_somewhere_or_says_why_not() -> None:
    listed = set(NOT_RUNNABLE)
    found = {(f, b.splitlines()[0]) for f, b in BLOCKS}
    assert listed <= found, f"NOT_RUNNABLE names blocks the docs no longer have: {sorted(listed - found)}"
    assert {f for f, _ in RUNNABLE} <= set(SUBSTITUTIONS), "a new runnable block: give its file SUBSTITUTIONS"


def test_every_substitution_still_matches_its_document() -> None:
    for doc, substitutions in SUBSTITUTIONS.items():
        blocks = [b for f, b in RUNNABLE if f == doc]
        for old in substitutions:
            assert any(old in b for b in blocks), f"{doc} no longer contains {old!r}: update SUBSTITUTIONS"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("doc, block", RUNNABLE, ids=[f"{f}:{b.splitlines()[0][:30]}" for f, b in RUNNABLE])
def test_a_python_block_of_the_docs_runs(doc: str, block: str, tmp_path: Path) -> None:
    data = write_image_folder(tmp_path / "data", classes=3, train_per_class=40, val_per_class=8)
    for old, new in SUBSTITUTIONS[doc].items():  # each one is in some block of its document (the test below)
        block = block.replace(old, new.format(data=data))
    work = tmp_path / "work"
    work.mkdir()
    if doc in NEEDS_COMPETITION:
        competition_folder(work / "comp")
    env = child_env({"PYTHONPATH": str(REPO / "src"), "OMP_NUM_THREADS": "1"})
    proc = subprocess.run([sys.executable, "-c", block], cwd=work, env=env, capture_output=True, text=True,
                          timeout=280)
    assert proc.returncode == 0, f"{doc}:\n{block}\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr
