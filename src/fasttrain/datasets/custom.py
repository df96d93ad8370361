"""`--data module:callable`: the user's own datasets, e.g. feature sequences for an LSTM (Kaggle note).

The callable takes no arguments and returns (train, val) or (train, val, num_classes); each is a map-style
dataset (len + getitem) yielding (input, label) pairs. Image augmentation does not apply. The class count
comes from the third element, a `classes`/`num_classes` attribute, a `targets` attribute, the labels of a
TensorDataset, or a scan of the labels of a small dataset -- otherwise a UserError asks for it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from fasttrain.core.errors import Problem, UserError

if TYPE_CHECKING:
    from fasttrain.datasets.bundle import DataBundle


class MapStyle(Protocol):
    """A map-style dataset as the user's callable returns it: len() and [index] (a torch Dataset, a list...)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> object: ...


# Scan at most this many samples to find the labels of a dataset that has no `targets`/`classes` attribute.
LABEL_SCAN_LIMIT = 100_000


def custom_bundle(spec: str, num_classes: int | None) -> DataBundle:
    from fasttrain.models.registry import load_callable

    fn = load_callable(spec, "--data")
    try:
        result = fn()
    except UserError:
        raise
    except Exception as exc:
        raise UserError([Problem("--data", f"{spec}() raised {type(exc).__name__}: {exc}",
                                 "it must take no arguments and return (train, val) or (train, val, num_classes)")]
                        ) from exc
    return datasets_bundle(result, spec, num_classes)


def datasets_bundle(result: object, spec: str, num_classes: int | None, said: str | None = None) -> DataBundle:
    """A DataBundle of the user's own datasets: `result` is (train, val) or (train, val, num_classes), as a
    `module:callable` returned it or as handed to the Python API (core/given.py). `said`: how problems name
    where the datasets came from (default `spec()`)."""
    from fasttrain.datasets.bundle import DataBundle

    said = said or f"{spec}()"
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 3):
        raise UserError([Problem("--data", f"{said} returned {type(result).__name__}",
                                 "return (train_dataset, val_dataset) or (train, val, num_classes)")])
    train, val = result[0], result[1]
    for name, ds in (("train", train), ("val", val)):
        if not (hasattr(ds, "__len__") and hasattr(ds, "__getitem__")):
            raise UserError([Problem("--data", f"{said} {name} dataset is a {type(ds).__name__} without "
                                     "__len__ and __getitem__", "return map-style datasets (torch Dataset)")])
        if len(ds) == 0:
            raise UserError([Problem("--data", f"{said} {name} dataset is empty")])
    rank = check_sample(train, said, "train")
    check_sample(val, said, "val", rank=rank)
    given = result[2] if len(result) == 3 else num_classes
    classes = _infer_num_classes(train) if given is None else given
    if classes is None:
        raise UserError([Problem("--data", f"cannot tell how many classes {said} has",
                                 "return (train, val, num_classes), or give the dataset a `classes` attribute")])
    if not isinstance(classes, int) or classes < 1:
        raise UserError([Problem("--data", f"{said} num_classes must be a positive integer", value=classes)])
    names = list(getattr(train, "classes", [])) if isinstance(getattr(train, "classes", None), (list, tuple)) else []
    return DataBundle(train=train, val=val, num_classes=classes, class_names=[str(n) for n in names] or
                      [str(i) for i in range(classes)], kind="custom", source=spec, train_size=len(train),
                      val_size=len(val), in_memory="custom data are tensors in memory")


# Ranks of one sample's input the training step can batch and feed a model: features (1), sequences (2),
# images (3: C, H, W), clips (4: C, T, H, W).
INPUT_RANKS = (1, 2, 3, 4)


def check_sample(ds: MapStyle, said: str, name: str = "train", rank: int | None = None) -> int:
    """The rank of the first sample's input when `ds[0]` is an (input tensor, class label) pair the training
    step can use, else a UserError saying what it is. The label: an int, an integer 0-d tensor/numpy scalar, or
    a 1-d float tensor of class probabilities. `rank`: the train set's, which the val set must match.
    Called when the data is built, so a wrong sample stops the run before the model is built."""
    import numpy as np
    import torch

    fix = "each item must be (input tensor, class index), e.g. (torch.randn(5, 3), 2)"
    where = f"{said} {name} dataset"
    try:
        item = ds[0]
    except Exception as exc:
        text = str(exc).strip().splitlines()
        raise UserError([Problem("--data", f"{where}[0] raised {type(exc).__name__}" + (f": {text[0][:200]}"
                                 if text else ""), fix)]) from exc
    if not isinstance(item, (tuple, list)) or len(item) != 2:
        what = f"a {len(item)}-tuple" if isinstance(item, (tuple, list)) else _a(type(item).__name__)
        raise UserError([Problem("--data", f"{where}[0] is {what}, not an (input, label) pair", fix)])
    x, y = item
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x) if x.dtype != object else x
    if not isinstance(x, torch.Tensor):
        raise UserError([Problem("--data", f"{where}[0] input is {_a(type(x).__name__)}, not a tensor", fix)])
    if x.dim() not in INPUT_RANKS:
        raise UserError([Problem("--data", f"{where}[0] input has shape {tuple(x.shape)} (rank {x.dim()}); one "
                                 f"sample's input must have rank {INPUT_RANKS[0]} to {INPUT_RANKS[-1]} (features, "
                                 "sequence, C x H x W image, clip), without the batch dimension", fix)])
    if x.numel() == 0:
        raise UserError([Problem("--data", f"{where}[0] input has shape {tuple(x.shape)}: no values", fix)])
    if rank is not None and x.dim() != rank:
        raise UserError([Problem("--data", f"{where}[0] input has rank {x.dim()}, the train set's has rank {rank}",
                                 "train and val items must have the same shape")])
    _check_label(y, where, fix)
    return int(x.dim())


def _a(noun: str) -> str:
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"


def _check_label(y: Any, where: str, fix: str) -> None:
    import numpy as np
    import torch

    if isinstance(y, (np.generic, np.ndarray)):
        y = torch.as_tensor(np.asarray(y)) if np.asarray(y).dtype != object else y
    if isinstance(y, bool):
        raise UserError([Problem("--data", f"{where}[0] label is a bool, not a class index", fix, y)])
    if isinstance(y, int):
        if y < 0:
            raise UserError([Problem("--data", f"{where}[0] label is negative, not a class index", fix, y)])
        return
    if isinstance(y, torch.Tensor):
        if y.dim() == 0 and not y.is_floating_point() and not y.is_complex() and y.dtype != torch.bool:
            if int(y) < 0:
                raise UserError([Problem("--data", f"{where}[0] label is negative, not a class index", fix, int(y))])
            return
        if y.dim() == 1 and y.is_floating_point() and y.numel() > 0:
            return  # class probabilities (soft labels): cross-entropy takes them
        raise UserError([Problem("--data", f"{where}[0] label is a {str(y.dtype).replace('torch.', '')} tensor of "
                                 f"shape {tuple(y.shape)}, not a class index (or a 1-d float tensor of class "
                                 "probabilities)", fix)])
    shown = y if isinstance(y, (float, str)) and len(repr(y)) < 60 else None
    raise UserError([Problem("--data", f"{where}[0] label is {_a(type(y).__name__)}, not a class index", fix, shown)])


def _infer_num_classes(ds: Any) -> int | None:
    classes = getattr(ds, "classes", None)
    if isinstance(classes, (list, tuple)) and classes:
        return len(classes)
    declared = getattr(ds, "num_classes", None)
    if isinstance(declared, int):
        return declared
    labels = getattr(ds, "targets", None)
    if labels is None and hasattr(ds, "tensors") and len(ds.tensors) >= 2:  # torch TensorDataset
        labels = ds.tensors[-1]
    if labels is None and len(ds) <= LABEL_SCAN_LIMIT:
        try:
            labels = [ds[i][1] for i in range(len(ds))]
        except (IndexError, TypeError, KeyError):
            return None
    return _classes_from_labels(labels)


def _classes_from_labels(labels: Any) -> int | None:
    if labels is None:
        return None
    try:
        import torch

        values = torch.as_tensor(labels if not isinstance(labels, list) else [int(_scalar(v)) for v in labels])
    except (TypeError, ValueError, RuntimeError):  # RuntimeError: .item() of a class-probability vector
        return None
    if values.numel() == 0 or values.is_floating_point() or values.dim() != 1 or int(values.min()) < 0:
        return None  # float or multi-dimensional labels: not class indices
    return int(values.max()) + 1


def _scalar(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not value.is_integer():
        raise ValueError("float label")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("not a class index")
    return value
