"""fasttrain from Python: `train`, `doctor`, `estimate` and `plan`, each the same job as the command of the same name
(report/train_job.py, doctor/job.py, bench/estimate_job.py), called with the same typed request the command builds
from its flags, returning its result instead of printing it (api/results.py).

Their keywords are the commands' parameters, checked as the flags are (api/keywords.py: `batch_size=64` is
`--batch-size 64`, `set={"optim.lr": 0.1}` is `--set optim.lr=0.1`); runs go to runs/ as on the command line, with the
same profiles, tuning, checkpoints, resume and signals. What Python adds: a model given as a torch.nn.Module object,
or as a class or function that builds one, and data given as a (train, val) pair of datasets (core/given.py's
GivenInputs, a typed field of the request), and in a notebook a display that updates in place (ui/notebook.py).
Bad input raises UserError with the command line's one-line reason; a job that failed, JobFailed.
Importing this module imports neither torch nor timm; calling a function runs what its command runs.
"""
from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, Union

from fasttrain.api.keywords import parameters
from fasttrain.api.results import Forecast, Plan, Report, RunSummary
from fasttrain.api.session import api_call, own_signals
from fasttrain.core.errors import Problem, UserError
from fasttrain.core.given import GivenInputs

if TYPE_CHECKING:
    import pandas
    from torch import nn
    from torch.utils.data import Dataset

    from fasttrain.report.train_job import TrainOutcome
    from fasttrain.train.loop.events import DisplayFactory

# A model: a name (timm, torchvision, tiny_cnn, module:callable), a torch.nn.Module, or a class or function that
# builds one (called with num_classes= and image_size= when it takes them).
ModelLike = Union[str, "nn.Module", Callable[..., "nn.Module"]]
# Data: an ImageFolder path (train/ and val/, or class folders), a labels table (train.csv), "shapes", "synthetic", a
# (train, val) pair of map-style datasets yielding (input tensor, class index), or a pandas DataFrame of image paths
# (relative to the current folder, or to images_dir=) and labels.
DataLike = Union[str, "os.PathLike[str]", tuple["Dataset", "Dataset"], "pandas.DataFrame"]


def train(model: ModelLike, data: DataLike, *, profile: str | None = None, epochs: int | None = None,
          run_name: str | None = None, **settings: object) -> RunSummary:
    """Train `model` on `data` as `fasttrain train` does; -> the run's summary (also runs/NAME/summary.json).

    settings: any other flag of `fasttrain train` by its name with underscores: batch_size=64 or "auto",
    image_size=224, set={"optim.lr": 0.1}, resume="runs/NAME" (or "auto" with run_name), seed=1, no_tune=True,
    save_every_minutes=30, pretrained=True, quiet=True, runs_dir="runs", num_classes=..., on_nan="skip" ...
    data: a folder, a labels table ("train.csv"), or a DataFrame of image paths and labels, its paths relative to
    the current folder or to images_dir="FOLDER" (columns found as for a table; set={"data.label_column": ...}).
    A model object is trained in place (afterwards it holds the last epoch's weights) and a run of a model or data
    given as Python objects resumes from Python: the same call with resume="runs/NAME". In a notebook the run shows
    a live view in the cell; elsewhere the terminal's dashboard. A stopped run (the notebook's interrupt, SIGTERM)
    saves a checkpoint and returns its summary, with `interrupted` and `resume_command` set.
    Raises UserError for bad input (the command line's one-line reason), JobFailed when the run itself failed.
    """
    from fasttrain.ui.notebook import in_notebook, notebook_display
    started_at = time.time()  # the run's clock (elapsed_s, a time budget) starts at the call, not the kernel's start
    inputs, named = _inputs(model, data)
    keywords = {**named, "profile": profile, "epochs": epochs, "run_name": run_name, **_images_dir(settings)}
    try:
        with api_call(), own_signals():
            outcome = _train_job(inputs, keywords, "fasttrain.train", started_at=started_at,
                                 display=notebook_display if in_notebook() else None)
    finally:
        _hand_back(inputs.model)
    assert outcome.summary is not None  # fasttrain.train() takes no launch flags and no dry_run
    return RunSummary(outcome.summary)


def _train_job(inputs: GivenInputs, keywords: dict[str, object], who: str, *, allow: tuple[str, ...] = (),
               started_at: float | None = None, display: DisplayFactory | None = None) -> TrainOutcome:
    """The keywords as `fasttrain train`'s parameters (api/keywords.py), made a TrainArgs by the command's own
    train_args, and the job the command runs (report/train_job.py)."""
    from fasttrain.report.train_job import terminal_dashboard, train_job
    from fasttrain.train.setup.args import train_args
    values, explicit = parameters("train", keywords, who, allow)
    args = train_args(values, explicit, inputs=inputs)
    return train_job(args, display=display or terminal_dashboard, started_at=started_at)


def _hand_back(model_obj: object) -> None:
    """The user's model object as they gave it, classes included: on a CPU the run turns its convolutions into
    OnePixelConv2d (models/one_pixel.py), which a pickled copy of their model must not depend on."""
    if model_obj is not None and "torch" in sys.modules:
        import torch
        if isinstance(model_obj, torch.nn.Module):
            from fasttrain.models.one_pixel import to_plain
            to_plain(model_obj)


def plan(model: ModelLike, data: DataLike, *, profile: str | None = None, epochs: int | None = None,
         run_name: str | None = None, **settings: object) -> Plan:
    """What `fasttrain.train()` with the same arguments would do on this machine, and why (`train --dry-run`):
    device, precision after fallbacks, batch, workers, the scaled LR, the notes. Trains nothing."""
    inputs, named = _inputs(model, data)
    keywords = {**named, "profile": profile, "epochs": epochs, "run_name": run_name, **_images_dir(settings),
                "dry_run": True}
    with api_call():
        outcome = _train_job(inputs, keywords, "fasttrain.plan", allow=("dry_run",))
    assert outcome.view is not None
    return Plan(outcome.prep.plan, outcome.view)


def doctor(*, profile: str | None = None, **settings: object) -> Report:
    """Inspect this machine as `fasttrain doctor` does (GPU, PyTorch build, CPU, RAM, /dev/shm, disk); -> the
    findings and the recommended settings. settings: data="DIR" (read speed), target_images_per_s=N,
    write_profile="FILE" (with force=True to replace it), report_from="doctor.json"."""
    from fasttrain.doctor.job import DoctorRequest, run_doctor
    with api_call():
        values, _ = parameters("doctor", {"profile": profile, **settings}, "fasttrain.doctor")
        return Report(run_doctor(_request(DoctorRequest, values)))


def estimate(model: ModelLike, *, profile: str | None = None, **settings: object) -> Forecast:
    """Forecast a run as `fasttrain estimate` does: time, GPU memory, host RAM, bottleneck and cost, for the
    profile's GPU (or gpu="T4") before paying for it. settings: image_size=, epochs=, dataset_size= or data="DIR",
    num_classes=, batch_size=, set={...}, measure=True (also time a few real steps here), compare=True."""
    from fasttrain.bench.estimate_job import EstimateRequest, run_estimate
    inputs, named = _inputs(model)
    name = named["model"]
    with api_call():
        values, _ = parameters("estimate", {"model": name, "profile": profile, **settings}, "fasttrain.estimate")
        result = run_estimate(_request(EstimateRequest, values, inputs=inputs))
    return Forecast(result, str(name))


_R = TypeVar("_R")
_NO_DATA = object()  # estimate() takes a model and no data


def _request(kind: type[_R], values: dict[str, Any], **extra: object) -> _R:
    """A command's request from its parameters' values (the fields are the parameters' names; how the result is
    shown, --json or --all, is the command's and not a field)."""
    names = {f.name for f in dataclasses.fields(kind)}  # type: ignore[arg-type]  # every request is a dataclass
    return kind(**{k: v for k, v in values.items() if k in names}, **extra)


def _inputs(model: object, data: object = _NO_DATA) -> tuple[GivenInputs, dict[str, str]]:
    """(the model and data given as Python objects, typed; the model and data keywords: a name or a path as given,
    else the name the run knows the object by). No `data`: estimate's, which takes none."""
    model_obj, model_spec = _model_arg(model)
    pair, data_spec = _data_arg(data) if data is not _NO_DATA else (None, "")
    inputs = GivenInputs(model_obj, pair)
    named = {"model": inputs.model_name or model_spec}
    return inputs, named if data is _NO_DATA else {**named, "data": inputs.data_name or data_spec}


def _model_arg(model: object) -> tuple[object | None, str]:
    """(the object to register, or None; the name to pass as --model)."""
    if isinstance(model, str):
        return None, model
    if callable(model):  # a torch.nn.Module is callable too, and so is a class or a builder function
        return model, ""
    raise UserError([Problem("model", "expected a torch.nn.Module, a class or function that builds one, or a model "
                             "name (timm, torchvision, tiny_cnn, module:callable)", "", model)])


def _data_arg(data: object) -> tuple[object | None, str]:
    """(the (train, val) pair or DataFrame to register, or None; the spec to pass as --data)."""
    if isinstance(data, str) or (isinstance(data, os.PathLike) and isinstance(os.fspath(data), str)):
        return None, os.fspath(data)
    if hasattr(data, "columns") and (hasattr(data, "itertuples") or hasattr(data, "to_dict")):
        return data, ""  # a DataFrame of image paths and labels, duck-typed (pandas is not a dependency)
    if isinstance(data, (tuple, list)) and len(data) == 2:
        if all(hasattr(part, "dataset") and hasattr(part, "batch_size") for part in data):
            raise UserError([Problem("data", "got DataLoaders: fasttrain builds the loaders the plan asks for (batch, "
                                     "workers, pinned memory)", "pass their datasets: (train_loader.dataset, "
                                     "val_loader.dataset)")])
        return (data[0], data[1]), ""
    raise UserError([Problem("data", "expected a data folder, a labels table (train.csv), shapes or synthetic, a "
                             "DataFrame of image paths and labels, or a (train, val) pair of datasets",
                             "e.g. fasttrain.train(Net(), (train_ds, val_ds))", data)])


def _images_dir(settings: dict[str, object]) -> dict[str, object]:
    """images_dir="FOLDER" (where a DataFrame's or a table's image paths start) as set={"data.images_dir": ...}."""
    if settings.get("images_dir") is None:
        return {k: v for k, v in settings.items() if k != "images_dir"}
    rest = dict(settings)
    given = rest.pop("images_dir")
    folder = os.fspath(given) if isinstance(given, (str, os.PathLike)) else str(given)
    sets = rest.get("set") or {}
    if isinstance(sets, dict):
        rest["set"] = {**sets, "data.images_dir": folder}
    else:
        rest["set"] = [*(sets if isinstance(sets, (list, tuple)) else [sets]), f"data.images_dir={folder}"]
    return rest
