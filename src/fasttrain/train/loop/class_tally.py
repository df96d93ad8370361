"""Which classes the model gets wrong: the confusion matrix validation adds up (on the device, no host sync per
batch), the best epoch's and the last validation's kept for the summary, and the pure reading of a matrix:
per-class accuracy and the most confused pairs (summary.json's `per_class` and `confused`).

A matrix is counted [true class, predicted class] from the same top-1 (test-time flip included) that acc@1 counts,
so its trace over its sum is the epoch's val_acc1 exactly, and the best epoch is found here by the rule
FitProgress uses (a strictly higher acc@1): the epoch whose weights best.pt and the model files hold.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from fasttrain.train.parallel.ddp import DistContext

# Above this many classes no matrix is kept: C x C int64 counts are 8 MB at 1,000 classes, 800 MB at 10,000, on
# the device and twice on the host (the last and the best epoch's).
MAX_CLASSES = 1000
TOP_PAIRS = 10  # confused pairs summary.json lists, most often first
# summary.json's `confusion_matrix` (the report draws it) up to this many classes: a larger one is unreadable drawn.
MATRIX_SAVED_UP_TO = 50

# What validation hands over once per whole validation: the summed [true, predicted] counts (None above
# MAX_CLASSES) and the class count.
ClassSink = Callable[["torch.Tensor | None", int], None]


def add_pairs(counts: torch.Tensor | None, targets: torch.Tensor, predicted: torch.Tensor,
              classes: int) -> torch.Tensor | None:
    """`counts` (flat, C*C, on the device; None: a new one) plus this batch's (true, predicted) pairs; None above
    MAX_CLASSES. index_add_, not bincount: bincount on CUDA reads the largest index back to size its output (a
    host sync every batch)."""
    import torch
    if classes > MAX_CLASSES:
        return None
    if counts is None:
        counts = torch.zeros(classes * classes, dtype=torch.long, device=targets.device)
    pairs = targets.long() * classes + predicted.long()
    return counts.index_add_(0, pairs, torch.ones_like(pairs))


def summed(counts: torch.Tensor | None, classes: int | None, dist: DistContext | None) -> torch.Tensor | None:
    """The [true, predicted] matrix on the host, summed over ranks like the other validation sums (the gloo control
    group: int64 on the CPU); every rank calls it, one whose shard was empty with zeros. None above MAX_CLASSES."""
    import torch
    if not classes or classes > MAX_CLASSES:
        return None
    host = counts.cpu() if counts is not None else torch.zeros(classes * classes, dtype=torch.long)
    if dist is not None:
        host = dist.sum_counts(host)
    return host.view(classes, classes)


@dataclass(frozen=True)
class Confusion:
    """One whole validation's matrix: rows the true class, columns the predicted one (int64, on the host)."""

    epoch: int              # 1-based
    matrix: torch.Tensor
    correct: int            # the trace: acc@1's hits
    total: int              # validation images


class ClassTally:
    """The confusion matrices a run keeps: the last validation's and the best epoch's (a strictly higher acc@1,
    FitProgress's rule) since this process started (a resumed run's earlier epochs are not here)."""

    def __init__(self) -> None:
        self.last: Confusion | None = None
        self.best: Confusion | None = None
        self.too_many: int | None = None  # the class count, when above MAX_CLASSES (nothing kept)

    def at(self, epoch: int) -> ClassSink:
        """The sink for the validation of `epoch` (1-based)."""
        return lambda matrix, classes: self.record(epoch, matrix, classes)

    def record(self, epoch: int, matrix: torch.Tensor | None, classes: int) -> None:
        if matrix is None:
            self.too_many = classes if classes > MAX_CLASSES else self.too_many
            return
        total = int(matrix.sum())
        if not total:
            return
        seen = Confusion(epoch, matrix, int(matrix.diagonal().sum()), total)
        self.last = seen
        if self.best is None or seen.correct / seen.total > self.best.correct / self.best.total:
            self.best = seen


def per_class(matrix: Sequence[Sequence[int]], names: Sequence[str]) -> list[dict[str, Any]]:
    """[{"class", "accuracy", "images"}] in class order; accuracy None for a class with no validation image. Pure."""
    out = []
    for i, row in enumerate(matrix):
        images = int(sum(row))
        out.append({"class": class_name(names, i), "accuracy": row[i] / images if images else None,
                    "images": images})
    return out


def confused_pairs(matrix: Sequence[Sequence[int]], names: Sequence[str], top: int = TOP_PAIRS) -> list[dict[str, Any]]:
    """The `top` most frequent mistakes: [{"true", "predicted", "count", "share"}], share = count / the true
    class's validation images; most often first (ties: the larger share, then class order). Pure."""
    totals = [int(sum(row)) for row in matrix]
    cells = [(-int(n), -(n / totals[t]), t, p) for t, row in enumerate(matrix) for p, n in enumerate(row)
             if t != p and n > 0]
    return [{"true": class_name(names, t), "predicted": class_name(names, p), "count": -n, "share": -share}
            for n, share, t, p in sorted(cells)[:top]]


def class_name(names: Sequence[str], index: int) -> str:
    """The class's name, or its index when the data named none (synthetic data, tensors from Python)."""
    return str(names[index]) if 0 <= index < len(names) else str(index)


def class_report(tally: ClassTally | None, names: Sequence[str], best_epoch: int | None) -> dict[str, Any]:
    """summary.json's per-class keys: per_class, confused, confusion_matrix ([true][predicted] counts; None above
    MATRIX_SAVED_UP_TO classes), per_class_epoch and per_class_basis ("best": the epoch
    best.pt and the model files hold; "last": the last validation, when the best epoch's matrix is not here,
    e.g. it came before a resume); per_class_note when nothing could be kept. {} without validation."""
    if tally is None:
        return {}
    if tally.too_many is not None and tally.last is None:
        return {"per_class": None, "confused": None, "per_class_note":
                f"no per-class accuracy: {tally.too_many:,} classes (a confusion matrix is kept up to "
                f"{MAX_CLASSES:,})"}
    best = tally.best if tally.best is not None and tally.best.epoch == best_epoch else None
    chosen = best or tally.last
    if chosen is None:
        return {}
    matrix = chosen.matrix.tolist()
    return {"per_class": per_class(matrix, names), "confused": confused_pairs(matrix, names),
            "confusion_matrix": matrix if len(matrix) <= MATRIX_SAVED_UP_TO else None,
            "per_class_epoch": chosen.epoch, "per_class_basis": "best" if best is not None else "last"}
