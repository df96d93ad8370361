"""Python objects handed to the API (`fasttrain.train(Net(), (train, val))`): typed inputs of a run, and the names
the run knows them by.

A model object or class, a (train, val) pair of datasets, or a DataFrame of image paths and labels (a labels table:
datasets/labels_table.py) travels to the run as a typed field, `TrainArgs.inputs` (a `GivenInputs`, made by the API),
beside the name it is known by (`python:Net#1a2b3c4d`, in `TrainArgs.model` / `.data`).

Why a registry stays as well: below the run's arguments, models and data are built by name, in many places that take
a name and nothing else (models/registry.py's create_model for the meta-device check, the forecast, the tuning
trial, the batch search and the run; datasets/build.py and datasets/data_source.py), and the name, not the object,
is what the plan, summary.json, profile.yaml and the checkpoint record (they must stay serialisable). So the job that
runs the arguments (report/train_job.py, bench/estimate_job.py) registers the inputs here under their names for the
length of the job (`registered`), and those places find them (models/given_model.py). A later process that meets
such a name (`fasttrain train --resume` in a shell) cannot rebuild the object: `missing()` says so, and how to resume
from Python. No torch here: the fingerprint reads only repr() and shapes.
"""
from __future__ import annotations

import hashlib
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fasttrain.core.errors import Problem, UserError

PREFIX = "python:"
MAX_LABEL_CHARS = 60  # a class's name in the run's model name: beyond it, a generated name

_MODELS: dict[str, object] = {}
_DATA: dict[str, object] = {}  # a (train, val) pair, or a DataFrame-like table


def is_given(name: object) -> bool:
    """A name the API gave a Python object (registered or not: a later process sees the name only)."""
    return isinstance(name, str) and name.startswith(PREFIX)


def _label(obj: object) -> str:
    """The class's (or the builder function's) own name, as the notebook wrote it: `Net`, `build_net`."""
    named = obj if isinstance(obj, type) or (not hasattr(obj, "state_dict") and callable(obj)) else type(obj)
    text = getattr(named, "__name__", None)
    text = text if isinstance(text, str) and text else type(obj).__name__
    return "".join(c if c.isalnum() or c in "._<>" else "_" for c in text)[:MAX_LABEL_CHARS]


def _fingerprint(obj: object) -> str:
    """8 hex digits that change with the architecture: a model's repr and its tensors' shapes; a class or a
    builder function: its module, qualified name and code. The name keys every per-process and measurement cache
    (the model's cost, the tuning cache), so a notebook cell that redefines `class Net` makes another name (issue
    43: the second run was forecast as the first Net), while the same definition in a later process makes the same
    one (a resume from Python, the trial's cached choice)."""
    state = getattr(obj, "state_dict", None)
    if callable(state) and not isinstance(obj, type):
        shapes = [(key, tuple(getattr(value, "shape", ()))) for key, value in state().items()]
        text = f"{type(obj).__module__}.{type(obj).__qualname__}|{obj!r}|{shapes}"
    else:
        text = f"{getattr(obj, '__module__', '')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}|" \
               f"{_definition(obj)}"
    return hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:8]


_PLAIN = (str, int, float, bool, type(None))  # a global or class attribute that may set a size: part of the definition


def _definition(obj: object, depth: int = 0) -> str:
    """A class's or a function's definition as text: its functions' code, the plain values they read from the
    module (`WIDTH = 64`) and its own plain attributes, and the same of its base classes from its own module."""
    if isinstance(obj, type):
        parts = [_definition(base, depth + 1) for base in obj.__bases__
                 if base.__module__ == obj.__module__ and depth < 8]
        for key, value in vars(obj).items():
            inner = getattr(value, "__func__", None) or getattr(value, "fget", None) or value
            if hasattr(inner, "__code__"):
                parts.append(f"{key}:{_definition(inner, depth + 1)}")
            elif isinstance(value, _PLAIN) and not key.startswith("__"):
                parts.append(f"{key}={value!r}")
        return "|".join(parts)
    code = getattr(obj, "__code__", None)
    if code is None:
        return ""
    module = getattr(obj, "__globals__", {})
    plain = {name: module[name] for name in _names(code) if name in module and isinstance(module[name], _PLAIN)}
    return f"{_code_text(code)}|{sorted(plain.items())!r}|{getattr(obj, '__defaults__', None)!r}"


def _names(code: types.CodeType) -> set[str]:
    """The global names a code object and the functions inside it read."""
    inner = (_names(c) for c in code.co_consts if isinstance(c, types.CodeType))
    return set(code.co_names).union(*inner)


def _code_text(code: types.CodeType) -> str:
    """Instructions, names and constants (nested code too; a set's members sorted: their order follows hashing)."""
    consts = [_code_text(c) if isinstance(c, types.CodeType) else
              repr(sorted(map(repr, c))) if isinstance(c, frozenset) else repr(c) for c in code.co_consts]
    return f"{code.co_code.hex()}|{code.co_names}|{consts}"


def model_name(model: object) -> str:
    """The run's name for a model object, class or builder: `python:Net#1a2b3c4d`."""
    return f"{PREFIX}{_label(model)}#{_fingerprint(model)}"


def data_name(train: object, val: object) -> str:
    """The run's name for a (train, val) pair: `python:Flowers,Flowers`."""
    return f"{PREFIX}{_label(type(train))},{_label(type(val))}"


def table_name(frame: object) -> str:
    """The run's name for a DataFrame of image paths and labels: `python:DataFrame#1a2b3c4d` (its columns and
    length, so two different tables of one call do not share a name)."""
    try:
        table: Any = frame  # a DataFrame, typed loosely: core never imports pandas
        text = f"{list(map(str, table.columns))}|{len(table)}"
    except Exception:
        text = type(frame).__qualname__
    return f"{PREFIX}{_label(type(frame))}#{hashlib.sha1(text.encode('utf-8', 'replace')).hexdigest()[:8]}"


@contextmanager
def given(model: object = None, data: object = None) -> Iterator[tuple[str | None, str | None]]:
    """Register `model` and/or the `data` (a (train, val) pair or a DataFrame) for the length of the block ->
    (model name, data name), None for what was not given. Nested calls with the same object are fine: the name is
    the same."""
    data_as = (None if data is None else data_name(*data) if isinstance(data, tuple) else table_name(data))
    names: tuple[str | None, str | None] = (model_name(model) if model is not None else None, data_as)
    saved = (_MODELS.get(names[0] or ""), _DATA.get(names[1] or ""))
    if names[0] is not None:
        _MODELS[names[0]] = model
    if names[1] is not None and data is not None:
        _DATA[names[1]] = data
    try:
        yield names
    finally:
        for table, name, before in ((_MODELS, names[0], saved[0]), (_DATA, names[1], saved[1])):
            if name is None:
                continue
            if before is None:
                table.pop(name, None)
            else:
                table[name] = before


class GivenInputs:
    """The Python objects of one call, with the names the run knows them by (None: not given as an object).

    Not a dataclass, and never copied (`copy.deepcopy` returns it as it is): dataclasses.asdict() of the run's
    arguments (the checkpoint's saved arguments) would otherwise deep-copy the user's model and datasets."""

    __slots__ = ("data", "data_name", "model", "model_name")

    def __init__(self, model: object = None, data: object = None):
        self.model, self.data = model, data
        self.model_name = model_name(model) if model is not None else None
        self.data_name = None if data is None else data_name(*data) if isinstance(data, tuple) else table_name(data)

    def __copy__(self) -> GivenInputs:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> GivenInputs:
        return self

    def __repr__(self) -> str:
        return f"GivenInputs(model={self.model_name!r}, data={self.data_name!r})"


@contextmanager
def registered(inputs: GivenInputs | None) -> Iterator[None]:
    """`inputs` findable by their names (model(), datasets()) for the length of the block; None: nothing to do."""
    if inputs is None:
        yield
        return
    with given(inputs.model, inputs.data):
        yield


def model(name: str) -> object:
    """The model object, class or builder registered under `name`, else the UserError of missing()."""
    if name not in _MODELS:
        raise missing(name, "--model")
    return _MODELS[name]


def datasets(name: str) -> object:
    """The (train, val) pair or the DataFrame registered under `name`, else the UserError of missing()."""
    if name not in _DATA:
        raise missing(name, "--data")
    return _DATA[name]


def missing(name: str, where: str) -> UserError:
    """A given name met where its object is not (a run of Python objects resumed from a shell)."""
    what = "model" if where == "--model" else "data"
    return UserError([Problem(where, f"{name!r} was a Python object handed to fasttrain.train(), which a command "
                              "line cannot rebuild",
                              f"resume from Python with the same {what}: fasttrain.train(model, data, "
                              "resume='runs/NAME') (docs/notebook.md), or train a named model on a data folder",
                              )])
