"""`--data module:callable`: the user's own datasets, e.g. feature sequences for an LSTM (Kaggle note).

The callable takes no arguments and returns (train, val) or (train, val, num_classes); each is a map-style
dataset (len + getitem) yielding (input, label) pairs. Image augmentation does not apply. The class count
comes from the third element, a `classes`/`num_classes` attribute, a `targets` attribute, the labels of a
TensorDataset, or a scan of the labels of a small dataset -- otherwise a UserError asks for it.
"""
from __future__ import annotations

from typing import Any

from fasttrain.core.errors import Problem, UserError

# Scan at most this many samples to find the labels of a dataset that has no `targets`/`classes` attribute.
LABEL_SCAN_LIMIT = 100_000


def custom_bundle(spec: str, num_classes: int | None) -> Any:
    from fasttrain.datasets.bundle import DataBundle
    from fasttrain.models.registry import load_callable

    fn = load_callable(spec, "--data")
    try:
        result = fn()
    except UserError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's code: report it as their input problem
        raise UserError([Problem("--data", f"{spec}() raised {type(exc).__name__}: {exc}",
                                 "it must take no arguments and return (train, val) or (train, val, num_classes)")]
                        ) from exc
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 3):
        raise UserError([Problem("--data", f"{spec}() returned {type(result).__name__}",
                                 "return (train_dataset, val_dataset) or (train, val, num_classes)")])
    train, val = result[0], result[1]
    for name, ds in (("train", train), ("val", val)):
        if not (hasattr(ds, "__len__") and hasattr(ds, "__getitem__")):
            raise UserError([Problem("--data", f"{spec}() {name} dataset is a {type(ds).__name__} without "
                                     "__len__ and __getitem__", "return map-style datasets (torch Dataset)")])
        if len(ds) == 0:
            raise UserError([Problem("--data", f"{spec}() {name} dataset is empty")])
    given = result[2] if len(result) == 3 else num_classes
    classes = _infer_num_classes(train) if given is None else given
    if classes is None:
        raise UserError([Problem("--data", f"cannot tell how many classes {spec}() has",
                                 "return (train, val, num_classes), or give the dataset a `classes` attribute")])
    if not isinstance(classes, int) or classes < 1:
        raise UserError([Problem("--data", f"{spec}() num_classes must be a positive integer", value=classes)])
    names = list(getattr(train, "classes", [])) if isinstance(getattr(train, "classes", None), (list, tuple)) else []
    return DataBundle(train=train, val=val, num_classes=classes, class_names=[str(n) for n in names] or
                      [str(i) for i in range(classes)], kind="custom", source=spec, train_size=len(train),
                      val_size=len(val))


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
    except (TypeError, ValueError):
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
