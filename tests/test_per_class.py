"""Which classes drag the score: the confusion matrix validation adds up (on a real tiny model, with and without
test-time flip, through a world-of-one process group), per-class accuracy and the most confused pairs read from
it, the best epoch's matrix chosen by the rule best.pt follows, the lines the run ends with and opens with at 80
columns, and a real `fasttrain train --json` whose summary.json has every class."""
from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from image_tree import write_tree
from loop_helpers import cpu_plan

from fasttrain.train.loop.class_tally import (
    MAX_CLASSES,
    ClassTally,
    class_report,
    confused_pairs,
    per_class,
)
from fasttrain.train.run.summary import RunSummary
from fasttrain.train.run.summary_parts import ClassScore
from fasttrain.train.setup.plan_view import classes_text
from fasttrain.ui.ending import ending_lines

NAMES = ["T-shirt", "Trouser", "Pullover"]
# rows: the true class, columns: the predicted one
KNOWN = [[8, 2, 0],
         [0, 10, 0],
         [1, 5, 4]]


# -- the pure reading of a matrix ---------------------------------------------------------------------
def test_a_known_matrix_reads_as_per_class_accuracy_and_pairs() -> None:
    assert per_class(KNOWN, NAMES) == [{"class": "T-shirt", "accuracy": 0.8, "images": 10},
                                       {"class": "Trouser", "accuracy": 1.0, "images": 10},
                                       {"class": "Pullover", "accuracy": 0.4, "images": 10}]
    assert confused_pairs(KNOWN, NAMES) == [
        {"true": "Pullover", "predicted": "Trouser", "count": 5, "share": 0.5},
        {"true": "T-shirt", "predicted": "Trouser", "count": 2, "share": 0.2},
        {"true": "Pullover", "predicted": "T-shirt", "count": 1, "share": 0.1}]
    # a class with no validation image has no accuracy; unnamed classes read as their index
    assert per_class([[0, 0], [1, 1]], []) == [{"class": "0", "accuracy": None, "images": 0},
                                               {"class": "1", "accuracy": 0.5, "images": 2}]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 7).flatmap(lambda c: st.lists(st.lists(st.integers(0, 50), min_size=c, max_size=c),
                                                     min_size=c, max_size=c)),
       st.integers(0, 12))
def test_any_matrix_reads_consistently(matrix: list[list[int]], top: int) -> None:
    rows = [ClassScore.from_json(r) for r in per_class(matrix, [])]
    assert sum(r.images for r in rows) == sum(map(sum, matrix))
    assert sum(round((r.accuracy or 0.0) * r.images) for r in rows) == sum(matrix[i][i] for i in range(len(matrix)))
    assert all(0 <= r.accuracy <= 1 for r in rows if r.accuracy is not None)
    pairs = confused_pairs(matrix, [], top)
    mistakes = [n for t, row in enumerate(matrix) for p, n in enumerate(row) if t != p and n]
    assert len(pairs) == min(top, len(mistakes))
    assert [p["count"] for p in pairs] == sorted(mistakes, reverse=True)[:len(pairs)]
    assert all(0 < p["share"] <= 1 and p["true"] != p["predicted"] for p in pairs)


def _matrix(rows: list[list[int]]) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.long)


def test_the_best_epoch_is_kept_and_said_else_the_last_validation() -> None:
    tally = ClassTally()
    tally.at(1)(_matrix([[5, 5], [5, 5]]), 2)   # 50%
    tally.at(2)(_matrix([[9, 1], [1, 9]]), 2)   # 90%: the best
    tally.at(3)(_matrix([[9, 1], [1, 9]]), 2)   # 90% again: not better, best.pt keeps epoch 2
    tally.at(4)(_matrix([[10, 0], [4, 6]]), 2)  # 80%: the last
    best = class_report(tally, ["a", "b"], best_epoch=2)
    assert (best["per_class_epoch"], best["per_class_basis"]) == (2, "best")
    assert [c["accuracy"] for c in best["per_class"]] == [0.9, 0.9]
    # the best epoch came before a resume: this process never saw its matrix
    resumed = class_report(tally, ["a", "b"], best_epoch=7)
    assert (resumed["per_class_epoch"], resumed["per_class_basis"]) == (4, "last")
    assert resumed["confused"] == [{"true": "b", "predicted": "a", "count": 4, "share": 0.4}]
    assert class_report(ClassTally(), ["a"], None) == {} and class_report(None, [], None) == {}


def test_too_many_classes_keep_no_matrix_and_say_so() -> None:
    from fasttrain.train.loop.class_tally import add_pairs
    many = MAX_CLASSES + 1
    assert add_pairs(None, torch.tensor([0]), torch.tensor([1]), many) is None
    tally = ClassTally()
    tally.at(1)(None, many)
    report = RunSummary.from_json(class_report(tally, [], 1))
    assert report.per_class is None and report.per_class_note is not None and "1,001 classes" in report.per_class_note
    assert any("1,001 classes" in line for line in ending_lines(report))


# -- the lines a user reads -------------------------------------------------------------------------------
FASHION = ["T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


def test_the_class_line_names_the_first_and_last_classes_within_its_width() -> None:
    assert classes_text(10, FASHION, 56) == "10 classes: T-shirt, Trouser, Pullover, ... Ankle boot"
    assert classes_text(3, NAMES) == "3 classes: T-shirt, Trouser, Pullover"
    assert classes_text(10, []) == "10 classes"


@settings(max_examples=80, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=60), min_size=1, max_size=40), st.integers(10, 120))
def test_any_class_names_fit_their_line(names: list[str], width: int) -> None:
    text = classes_text(len(names), names, width)
    assert "\n" not in text and text.startswith(f"{len(names):,} class")
    assert len(text) <= width or text in ("1 class", f"{len(names):,} classes")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(min_size=1, max_size=80), min_size=2, max_size=12, unique=True), st.data())
def test_the_ending_class_rows_fit_80_columns(names: list[str], data: st.DataObject) -> None:
    c = len(names)
    matrix = [[data.draw(st.integers(0, 30)) for _ in range(c)] for _ in range(c)]
    tally = ClassTally()
    tally.at(3)(_matrix(matrix), c)
    summary = RunSummary.from_json(class_report(tally, names, best_epoch=3))
    lines = ["  " + line for line in ending_lines(summary)]
    assert all(len(line) <= 80 for line in lines), lines
    if summary.per_class is not None:
        wrong = [r for r in summary.per_class if r.accuracy is not None and r.accuracy < 1]
        assert bool(wrong) == any(line.startswith("  class accuracy   worst ") for line in lines)
        assert sum(line.startswith("  confused") for line in lines) == (1 if summary.confused else 0)


def test_the_ending_says_the_worst_classes_and_the_top_confusions() -> None:
    tally = ClassTally()
    tally.at(2)(_matrix(KNOWN), 3)
    lines = ending_lines(RunSummary.from_json({**class_report(tally, NAMES, best_epoch=2)}))
    assert lines[0] == "class accuracy   worst Pullover 40.0%, T-shirt 80.0% at best epoch 2"
    assert lines[1] == "confused         Pullover seen as Trouser: 5 of 10 (50%)"
    assert lines[2].startswith(" " * 17 + "T-shirt seen as Trouser: 2 of 10") and len(lines) == 4


# -- validation on a real model -------------------------------------------------------------------------
C = 3


def _picker() -> torch.nn.Module:
    """Logits = the first C pixels of a 1 x 2C image: each image says which class it is taken for; its mirror image
    (test-time flip) brings the last C pixels, reversed."""
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(2 * C, C, bias=False))
    with torch.no_grad():
        model[1].weight.copy_(torch.eye(C, 2 * C))
    return model


def _image(first: int, last_mirrored: int | None = None) -> torch.Tensor:
    pixels = torch.zeros(2 * C)
    pixels[first] = 1.0
    if last_mirrored is not None:  # after the flip, pixel 2C-1-j lands on j
        pixels[2 * C - 1 - last_mirrored] = 3.0
    return pixels.view(1, 1, 2 * C)


def _engine():
    from fasttrain.train.loop.step import StepEngine
    plan, profile = cpu_plan(speed={"precision": "fp32", "channels_last": False, "compile": False})
    return StepEngine.build(plan, profile.optim, _picker(), batches_per_epoch=1)


def _loader() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Two batches; class 2's second image is taken for 0 as is, and for 1 with its mirror image averaged in."""
    first = (torch.stack([_image(0), _image(1), _image(1)]), torch.tensor([0, 0, 1]))
    second = (torch.stack([_image(2), _image(0, last_mirrored=1), _image(1)]), torch.tensor([2, 2, 2]))
    return [first, second]


@pytest.mark.parametrize("flip", [False, True])
def test_validation_counts_the_same_top_1_as_its_accuracy(flip: bool) -> None:
    from fasttrain.train.loop.validation import evaluate
    tally = ClassTally()
    row = evaluate(_engine(), _loader(), test_flip=flip, classes_to=tally.at(1))
    assert tally.last is not None
    expected = [[1, 1, 0], [0, 1, 0], [1 - flip, 1 + flip, 1]]
    assert tally.last.matrix.tolist() == expected
    assert row["val_acc1"] == tally.last.correct / tally.last.total == 3 / 6
    assert row["val_images"] == tally.last.total == 6


def test_validation_sums_the_matrix_over_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The all-reduce path of a torchrun job, in a world of one (gloo, as on CPUs)."""
    from fasttrain.train.loop.validation import evaluate
    from fasttrain.train.parallel import ddp
    from fasttrain.train.types import WorkerWorld
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    tally = ClassTally()
    with ddp.joined(WorkerWorld(0, 0, 1, 1), "cpu") as ctx:
        evaluate(_engine(), _loader(), dist=ctx, classes_to=tally.at(1))
        evaluate(_engine(), [], dist=ctx, classes_to=tally.at(2))  # an empty shard still takes part
    assert tally.last is not None and tally.last.matrix.tolist() == [[1, 1, 0], [0, 1, 0], [1, 1, 1]]


def test_the_sanity_check_keeps_no_matrix() -> None:
    from loop_helpers import make_trainer
    plan, profile = cpu_plan(speed={"precision": "fp32", "channels_last": False, "compile": False},
                             optim={"epochs": 1})
    trainer = make_trainer(plan, profile.optim, _picker(), batches=2)
    result = trainer.fit(_loader(), _loader()[:1], epochs=1)
    assert result.classes.last is not None and result.classes.last.epoch == 1
    assert result.classes.last.total == 3  # the whole validation once, not its sanity check too


# -- a real run -------------------------------------------------------------------------------------------
def test_a_run_says_its_classes_first_and_ends_with_every_class(cli, tmp_path: Path) -> None:
    classes = {"T-shirt": 6, "Trouser": 6, "Pullover": 6, "Ankle boot": 6}
    write_tree(tmp_path / "data" / "train", classes)
    write_tree(tmp_path / "data" / "val", dict.fromkeys(classes, 3), seed=1)
    run = cli("train", "--data", str(tmp_path / "data"), "--model", "tiny_cnn", "--epochs", "1", "--json",
              "--no-tune", "--runs-dir", str(tmp_path / "runs"), "--run-name", "r")
    assert run.code == 0, run.err
    assert json.loads(run.out) == json.loads((tmp_path / "runs" / "r" / "summary.json").read_text())
    summary = RunSummary.from_json(json.loads(run.out))
    assert summary.per_class is not None and summary.confused is not None
    assert sorted(c.name for c in summary.per_class) == sorted(classes)
    assert sum(c.images for c in summary.per_class) == summary.history[-1].val_images == 12
    correct = sum(round((c.accuracy or 0.0) * c.images) for c in summary.per_class)
    assert correct / 12 == pytest.approx(summary.final_val_acc1)
    assert summary.per_class_epoch == 1 and summary.per_class_basis == "best"
    assert all(0 < p.share <= 1 for p in summary.confused)
    line = "4 classes: Ankle boot, Pullover, T-shirt, Trouser"
    assert line in run.err and run.err.index(line) < run.err.index("epoch done")
    assert re.search(r"^  class accuracy   ", run.err, re.MULTILINE)
    assert "Pullover" not in (tmp_path / "runs" / "r" / "metrics.jsonl").read_text()  # no matrix in the epoch rows
