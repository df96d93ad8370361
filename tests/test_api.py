"""The Python API (fasttrain/api/): `import fasttrain` stays light, the four calls are the commands (keywords are
the commands' parameters, made the request the command makes), a model object and a (train, val) pair of datasets
train through the command's own job, bad input is one
UserError with the command line's reason, and a run of Python objects resumes from Python (not from a shell)."""
from __future__ import annotations

import inspect
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import FIXTURES, child_env
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from loop_helpers import cpu_report, write_image_folder

API = ("train", "doctor", "estimate", "plan")
TRAIN_KEYWORDS = ("epochs", "batch_size", "seed", "image_size", "num_classes", "save_every", "on_nan",
                  "save_every_minutes", "profile", "resume", "set", "pretrained", "strict_data", "no_tune")


def test_import_fasttrain_imports_neither_torch_nor_timm() -> None:
    code = ("import inspect, sys, fasttrain\n"
            "for name in ('train', 'doctor', 'estimate', 'plan'):\n"
            "    assert callable(getattr(fasttrain, name)), name\n"
            "    inspect.signature(getattr(fasttrain, name))\n"
            "fasttrain.RunSummary, fasttrain.Report, fasttrain.Forecast, fasttrain.Plan\n"
            "heavy = sorted(m for m in ('torch', 'timm', 'torchvision') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=child_env(), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("name", API)
def test_api_calls_are_typed_and_documented(name: str) -> None:
    import fasttrain
    import fasttrain.api
    fn = getattr(fasttrain.api, name)
    sig = inspect.signature(fn)
    assert sig.return_annotation is not inspect.Signature.empty
    assert all(p.annotation is not inspect.Parameter.empty for p in sig.parameters.values()), sig
    assert len(inspect.getdoc(fn) or "") > 150
    member = getattr(fasttrain, name)  # the package's member of that name: a module that calls the function
    assert inspect.signature(member) == sig
    assert (member.__doc__ or "").startswith(fn.__doc__)


def test_the_callable_members_are_still_the_package_parts() -> None:
    import types

    import fasttrain
    from fasttrain.plan import make_plan
    from fasttrain.train import TrainArgs
    assert isinstance(fasttrain.train, types.ModuleType) and fasttrain.train.TrainArgs is TrainArgs
    assert fasttrain.plan.make_plan is make_plan and fasttrain.estimate.Request is not None


@pytest.mark.parametrize("command", ["train", "doctor", "estimate"])
def test_every_flag_of_a_command_is_a_keyword(command: str) -> None:
    from fasttrain.api import keywords
    cmd = keywords.command(command)
    table = keywords.keywords(cmd)
    for param in cmd.params:
        assert table[param.name] is param
        for opt in (o for o in param.opts if o.startswith("--")):
            assert table[opt[2:].replace("-", "_")] is param


def test_every_train_option_is_a_keyword_with_its_trainargs_field() -> None:
    """Each `fasttrain train` option, given from Python, reaches TrainArgs through the command's own train_args:
    a value other than the default changes the field it maps to, and is counted as given."""
    import dataclasses

    from fasttrain.api import keywords
    from fasttrain.train.setup.args import LAUNCH_PARAMS, RENAMED, train_args
    cmd = keywords.command("train")
    defaults, _ = keywords.parameters("train", {}, "fasttrain.train", allow=("dry_run",))
    base = train_args(defaults)
    fields = {f.name for f in dataclasses.fields(base)}
    for param in cmd.params:
        assert param.name in fields or param.name in RENAMED or param.name in LAUNCH_PARAMS, param.name
    odd = {"profile": "cpu", "model": "resnet18", "data": "synthetic", "epochs": 2, "batch_size": "auto",
           "sets": ["optim.lr=0.1"], "run_name": "x", "runs_dir": "out", "dry_run": True, "pretrained": True,
           "weights": "w.pt", "seed": 3, "quiet": True, "verbose": True, "image_size": 32, "num_classes": 4,
           "save_every": 2, "no_last": True, "strict_data": True, "resume": "auto", "on_nan": "skip",
           "save_every_minutes": 5, "no_tune": True, "time_budget": "2m", "deadline": "23:59", "max_cost": 1.5}
    untested = {p.name for p in cmd.params} - set(odd) - set(keywords.NOT_FROM_PYTHON) - set(keywords.LAUNCH_FLAGS)
    assert not untested, f"a new flag of `fasttrain train`: add it here ({sorted(untested)})"
    for name, value in odd.items():
        values, given = keywords.parameters("train", {name: value}, "fasttrain.train", allow=("dry_run",))
        args = train_args(values, given)
        field = RENAMED.get(name, name)
        assert getattr(args, field) != getattr(base, field) and given == {name}, name


def test_a_parameter_with_no_trainargs_field_is_refused_where_flags_become_fields() -> None:
    from fasttrain.train.setup.args import train_args
    with pytest.raises(TypeError, match="no TrainArgs field"):
        train_args({"epochs": 1, "warmup_epochs": 2})


def test_keywords_are_checked_by_the_flags_own_parameters() -> None:
    from fasttrain.api import keywords
    values, given = keywords.parameters("train", {"batch_size": 64, "set": {"optim.lr": 0.1, "loader.num_workers": 0},
                                                  "no_tune": True, "pretrained": False, "seed": None,
                                                  "runs_dir": Path("out"), "epochs": "3"}, "fasttrain.train")
    assert values["batch_size"] == "64" and values["sets"] == ["optim.lr=0.1", "loader.num_workers=0"]
    assert values["no_tune"] is True and values["runs_dir"] == Path("out") and values["epochs"] == 3
    assert values["seed"] == 0 and values["data"] == "shapes"  # the command's defaults
    assert given == {"batch_size", "sets", "no_tune", "runs_dir", "epochs"}


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(TRAIN_KEYWORDS), st.integers(min_value=0, max_value=40), st.sampled_from("aeiosx_"))
def test_a_misspelt_keyword_is_one_user_error(keyword: str, where: int, letter: str) -> None:
    """A keyword with a letter changed, dropped or doubled is refused by name, before anything runs."""
    import fasttrain
    from fasttrain.api import keywords
    from fasttrain.core.errors import UserError
    at = where % len(keyword)
    wrong = {0: keyword[:at] + letter + keyword[at + 1:], 1: keyword[:at] + keyword[at + 1:],
             2: keyword[:at] + letter + keyword[at:]}[where % 3]
    if wrong in keywords.keywords(keywords.command("train")) or not wrong.isidentifier():
        return  # a real keyword after all (or no Python name)
    with pytest.raises(UserError) as caught:
        fasttrain.train("tiny_cnn", "shapes", **{wrong: 1})
    assert f"no keyword {wrong!r}" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("given, words", [
    ({"epoch": 2}, "did you mean 'epochs'"),
    ({"lr": 0.1}, "set={'optim.base_lr': ...}"),
    ({"num_workers": 2}, "set={'loader.num_workers': ...}"),
    ({"json": True}, ".to_dict()"),
    ({"dry_run": True}, "fasttrain.plan"),
    ({"nproc_per_node": 2}, "from a shell"),
    ({"epochs": "three"}, "--epochs"),
    ({"epochs": [1, 2]}, "takes one value"),
    ({"no_tune": "yes"}, "True or False"),
])
def test_a_keyword_python_cannot_use_is_one_user_error(given: dict[str, Any], words: str) -> None:
    import fasttrain
    from fasttrain.core.errors import UserError
    with pytest.raises(UserError) as caught:
        fasttrain.train("tiny_cnn", "shapes", **given)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_dataloaders_instead_of_datasets_say_which_to_pass() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    import fasttrain
    from fasttrain.core.errors import UserError
    loader = DataLoader(TensorDataset(torch.zeros(4, 3), torch.zeros(4, dtype=torch.long)), batch_size=2)
    with pytest.raises(UserError, match=r"train_loader\.dataset"):
        fasttrain.train("tiny_cnn", (loader, loader))


@pytest.mark.parametrize("model, data, where", [
    (42, "shapes", "model"), (None, "shapes", "model"), ("tiny_cnn", 3.5, "data"), ("tiny_cnn", [1, 2, 3], "data"),
    ("tiny_cnn", b"shapes", "data"),
])
def test_a_model_or_data_of_no_known_kind_is_one_user_error(model: object, data: object, where: str) -> None:
    import fasttrain
    from fasttrain.core.errors import UserError
    with pytest.raises(UserError) as caught:
        fasttrain.train(model, data)  # type: ignore[arg-type]
    assert str(caught.value).startswith(f"{where}: expected")


@pytest.fixture
def planned(monkeypatch: pytest.MonkeyPatch) -> None:
    """fasttrain.plan() on the recorded CPU machine: no probe (a torch child process) per call."""
    import fasttrain.train.setup.prepare as prepare
    monkeypatch.setattr(prepare, "probe", cpu_report)


HOSTILE = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=30),
                    st.lists(st.text(max_size=8), max_size=3), st.dictionaries(st.text(max_size=12),
                                                                              st.text(max_size=6), max_size=2))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(TRAIN_KEYWORDS), HOSTILE, min_size=1, max_size=3))
def test_hostile_keywords_plan_or_raise_one_user_error(planned: None, tmp_path: Path, keywords: dict[str, Any]) -> None:
    import fasttrain
    from fasttrain.core.errors import UserError
    size = keywords.get("image_size")
    if isinstance(size, int) and not isinstance(size, bool) and size > 64:
        keywords["image_size"] = 64  # a valid large crop is a real (slow) plan, not hostile input
    try:
        result = fasttrain.plan("tiny_cnn", "shapes", runs_dir=tmp_path, **keywords)
    except UserError as exc:
        assert str(exc).strip() and "Traceback" not in str(exc)
    else:
        assert result.batch_size >= 1


def _net_and_data() -> tuple[Any, Any, Any]:
    """A model class and a Dataset class as a notebook defines them in its cells."""
    import torch
    from torch import nn
    from torch.utils.data import Dataset

    class Net(nn.Module):
        def __init__(self, num_classes: int = 3):
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.head = nn.Linear(8, num_classes)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.body(x))

    class Blobs(Dataset):
        def __init__(self, n: int, seed: int):
            g = torch.Generator().manual_seed(seed)
            self.y = torch.randint(0, 3, (n,), generator=g)
            self.x = torch.randn(n, 3, 16, 16, generator=g) + self.y.view(-1, 1, 1, 1).float()

        def __len__(self) -> int:
            return len(self.y)

        def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
            return self.x[i], int(self.y[i])

    return Net, Blobs(64, 0), Blobs(16, 1)


def test_a_model_object_trains_in_place_and_resumes_from_python_not_a_shell(tmp_path: Path,
                                                                             cli) -> None:
    import torch

    import fasttrain
    Net, train_ds, val_ds = _net_and_data()
    net = Net()
    before = net.head.weight.detach().clone()
    summary = fasttrain.train(net, (train_ds, val_ds), epochs=1, run_name="own", runs_dir=tmp_path, batch_size=16)
    assert isinstance(summary, fasttrain.RunSummary) and summary.epochs_run == 1
    assert summary.run_dir == tmp_path / "own" and summary.checkpoint_last == tmp_path / "own" / "last.pt"
    assert not torch.equal(before, net.head.weight.detach())  # the user's own object holds the trained weights
    assert type(net.body[0]) is torch.nn.Conv2d  # and its own classes (the run's CPU convolutions handed back)
    saved = json.loads((tmp_path / "own" / "summary.json").read_text())
    assert saved["model"].startswith("python:Net#") and saved["data"] == "python:Blobs,Blobs"
    assert "<pre" in summary._repr_html_() and "summary" in str(summary) and "epochs" in str(summary)

    shell = cli("train", "--resume", str(tmp_path / "own"), "--epochs", "2")  # a shell cannot rebuild the objects
    assert shell.code == 2 and "was a Python object handed to fasttrain.train()" in shell.err
    assert "resume from Python" in shell.err and "Traceback" not in shell.err

    again = fasttrain.train(Net, (train_ds, val_ds), epochs=2, resume=str(tmp_path / "own"))  # a class builds one
    assert again.epochs_run == 2 and len(again.history) == 2 and again.run_dir == tmp_path / "own"


def test_an_interrupted_run_returns_its_summary_and_the_callers_handlers(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import fasttrain
    monkeypatch.setenv("FASTTRAIN_TEST_SIGNAL_AT_STEP", "2")
    monkeypatch.setenv("FASTTRAIN_TEST_SIGNALS", "INT")  # the notebook's interrupt button
    Net, train_ds, val_ds = _net_and_data()
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    summary = fasttrain.train(Net(), (train_ds, val_ds), epochs=1, run_name="stop", runs_dir=tmp_path, batch_size=8)
    assert summary.interrupted == "SIGINT" and summary["checkpoint_written"]
    assert summary.resume_command is not None and summary.resume_command.startswith("fasttrain.train(")
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_doctor_returns_what_the_command_prints_as_json(cli) -> None:
    import fasttrain
    recorded = FIXTURES / "reports" / "cpu_only.json"
    report = fasttrain.doctor(report_from=recorded)
    shell = cli("doctor", "--report-from", str(recorded), "--json")
    assert report.to_dict() == json.loads(shell.out)
    assert report.status in ("ok", "warn", "fail") and "findings" in str(report)


def test_estimate_takes_a_model_object_and_prices_it_on_the_profiles_gpu() -> None:
    import fasttrain
    Net, _, _ = _net_and_data()
    forecast = fasttrain.estimate(Net(), profile="kaggle-t4", image_size=32, dataset_size=1000, num_classes=3)
    assert forecast.total_s is not None and forecast.total_s > 0 and forecast.device
    assert forecast.to_dict()["forecast"]["model"]["params"] == sum(p.numel() for p in Net().parameters())
    assert "T4" in str(forecast)


ODD = st.one_of(st.none(), st.integers(), st.floats(), st.text(max_size=6), st.binary(max_size=4),
                st.lists(st.integers(), max_size=3), st.tuples(st.integers(), st.text(max_size=3)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(ODD, st.tuples(ODD, ODD), st.lists(ODD, min_size=2, max_size=2)))
def test_hostile_data_is_one_user_error(planned: None, tmp_path: Path, data: object) -> None:
    """Anything as `data` that is no folder and no usable (train, val) pair: one UserError, whatever it holds."""
    import fasttrain
    from fasttrain.core.errors import UserError
    if isinstance(data, str) and data in ("shapes", "synthetic"):
        return
    with pytest.raises(UserError) as caught:
        fasttrain.plan("tiny_cnn", data, runs_dir=tmp_path)  # type: ignore[arg-type]
    assert str(caught.value).strip() and "Traceback" not in str(caught.value)


def test_the_notebook_display_redraws_one_output_with_the_dashboards_numbers(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """In a kernel (here faked: in_notebook, and the display handle), fasttrain.train() draws the dashboard's
    screen into one output, redrawn in place, and ends with the summary table."""
    import fasttrain
    from fasttrain.ui import notebook

    bundles: list[dict[str, str]] = []
    monkeypatch.setattr(notebook, "in_notebook", lambda: True)
    monkeypatch.setattr(notebook, "ipython_show", lambda: bundles.append)
    summary = fasttrain.train("tiny_cnn", write_image_folder(tmp_path / "data"), epochs=2, run_name="nb",
                              runs_dir=tmp_path / "runs", image_size=16, batch_size=4, no_tune=True)
    assert summary.epochs_run == 2 and len(bundles) >= 4
    assert all(set(b) == {"text/plain", "text/html"} for b in bundles)
    last = bundles[-1]["text/plain"]
    assert "epoch 2/2" in last and "verdict:" in last and "epochs" in last and "summary" in last
    assert "fasttrain  profile cpu" in bundles[0]["text/plain"]  # the terminal dashboard's own header line


def test_the_api_is_offline_for_its_call_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """fasttrain never downloads while it runs; the notebook's own downloads work again after the call."""
    import os

    import fasttrain
    from fasttrain.models.registry import OFFLINE_ENV
    for key in OFFLINE_ENV:
        monkeypatch.delenv(key, raising=False)
    seen: dict[str, str | None] = {}
    monkeypatch.setattr("fasttrain.doctor.checks.run_rules", lambda *a, **k: seen.update(
        {key: os.environ.get(key) for key in OFFLINE_ENV}) or [])
    fasttrain.doctor(report_from=FIXTURES / "reports" / "cpu_only.json")
    assert seen == OFFLINE_ENV
    assert not any(key in os.environ for key in OFFLINE_ENV)
