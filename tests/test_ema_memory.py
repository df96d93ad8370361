"""The moving average of the weights (optim.ema_decay) in the memory plan: one more copy of the weights on the
device in the estimate (its view and --json), in the footprint a run is fitted to (train/setup/footprint.py), and
in the `--batch-size auto` cache key, so an answer found without the average is not reused with it (under DDP,
where nothing backs off, that run ran out of memory)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES
from loop_helpers import cpu_plan

from fasttrain.core import arithmetic as ar
from fasttrain.estimate import calibration
from fasttrain.hardware.report import HardwareReport
from fasttrain.plan import make_plan
from fasttrain.profiles import presets
from fasttrain.profiles.schema import OptimSpec
from fasttrain.train.setup import batch_search as bs

TINY = ["--model", "tiny_cnn", "--image-size", "16", "--num-classes", "10"]
OVERHEAD = calibration.load()["memory"]["allocator_overhead"]


def _memory(cli, *sets: str) -> dict:
    result = cli("estimate", "--profile", "kaggle-t4", *TINY, *sets, "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)["forecast"]["memory"]


def test_the_estimate_counts_the_average_as_one_more_copy_of_the_weights(cli) -> None:
    plain, averaged = _memory(cli), _memory(cli, "--set", "optim.ema_decay=0.999")
    assert plain["ema"] == 0 and averaged["ema"] == averaged["weights"] > 0
    assert averaged["total"] - plain["total"] == pytest.approx(averaged["weights"] * OVERHEAD, abs=2)
    assert averaged["largest_batch"] <= plain["largest_batch"]


def test_the_estimate_view_shows_the_average(cli) -> None:
    shown = cli("estimate", "--profile", "kaggle-t4", *TINY, "--set", "optim.ema_decay=0.999")
    assert shown.code == 0 and "moving average (EMA)" in shown.out
    assert "moving average (EMA)" not in cli("estimate", "--profile", "kaggle-t4", *TINY).out


def test_the_footprint_a_run_is_fitted_to_holds_the_average() -> None:
    from fasttrain.train.setup.footprint import limits
    report = HardwareReport.model_validate(json.loads((FIXTURES / "reports" / "a10g.json").read_text()))
    params, per_sample = 25_557_032, 42.0 * ar.MIB   # resnet50 at 224 px

    def gpu_need(*sets: str) -> int:
        profile = presets.resolve("aws-a10g", env={}, sets=list(sets)).profile
        plan = make_plan(profile, report)
        found = limits(plan, profile, report, params, per_sample, calibration.load()["memory"])
        return next(lim for lim in found if lim.what == "GPU memory").need(64)

    grown = gpu_need("optim.ema_decay=0.999") - gpu_need("optim.ema_decay=null")
    assert grown == pytest.approx(params * 4 * OVERHEAD, abs=2)


def test_a_cached_batch_found_without_the_average_is_not_reused_with_it(tmp_path: Path) -> None:
    plan, _ = cpu_plan(speed={"precision": "fp32", "compile": False})
    cache = tmp_path / "batch_cache.json"

    def search(ema: float | None) -> bs.SearchResult:
        return bs.find_batch(plan, "tiny_cnn", 16, num_classes=3, optim=OptimSpec(ema_decay=ema), path=cache,
                             max_batch=2)

    without = search(None)
    first_with = search(0.999)
    assert not first_with.from_cache and first_with.key != without.key
    assert search(0.999).from_cache and search(None).from_cache   # each answer kept under its own key


def test_the_search_measures_steps_with_the_average(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its peak is real steps' peak (synthetic.py builds the StepEngine from the profile's optim): the average's
    copy is allocated in every trial."""
    from fasttrain.train.loop import step
    built: list[float] = []
    real = step.WeightAverage

    def counted(model, decay):
        built.append(decay)
        return real(model, decay)

    monkeypatch.setattr(step, "WeightAverage", counted)
    plan, _ = cpu_plan(speed={"precision": "fp32", "compile": False})
    result = bs.find_batch(plan, "tiny_cnn", 16, num_classes=3, optim=OptimSpec(ema_decay=0.9),
                           path=tmp_path / "c.json", max_batch=2)
    assert len(built) == len(result.trials) > 0 and set(built) == {0.9}
