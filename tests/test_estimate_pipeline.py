"""estimate as a what-if: the input pipeline estimated from this CPU without --data, and an over-budget loader
RAM forecast as the bottleneck (with its fix) instead of refused. Pure functions on recorded rates; the decode
probe once, on a tiny sample."""
from __future__ import annotations

import json

import pytest
from test_estimate import CONSTANTS, _cost, _device, _plan

from fasttrain.core.errors import UserError
from fasttrain.estimate import decode_rate
from fasttrain.estimate.forecast import HostWarning, LoaderSample, forecast, loader_feed_rate
from fasttrain.profiles import presets
from fasttrain.profiles.schema import AugmentSpec


def test_loader_feed_scales_by_workers_up_to_the_cores_a_process_gets() -> None:
    assert loader_feed_rate(100.0, workers=2, cores=4) == (200.0, 2)
    assert loader_feed_rate(100.0, workers=12, cores=4) == (400.0, 4)      # 12 workers share 4 cores
    assert loader_feed_rate(100.0, workers=0, cores=4) == (100.0, 1)       # the main process decodes
    assert loader_feed_rate(100.0, workers=8, cores=16, processes=4) == (400.0, 4)
    assert loader_feed_rate(100.0, workers=3, cores=None) == (300.0, 3)   # cores unknown: as asked


def test_an_estimated_input_pipeline_names_the_bottleneck_but_keeps_the_gpu_forecast() -> None:
    plan, prof = _plan(sets=["loader.num_workers=2"])
    slow = LoaderSample(50.0, "estimate from this CPU (recorded)", estimated=True)
    fc = forecast(plan, prof, _cost(), _device(), 10_000, 1, 64 * 2**30, CONSTANTS, slow, cores=4)
    gpu = fc.speed["compute_only_images_per_s"]
    assert gpu > 100 and fc.speed["images_per_s"] == pytest.approx(gpu)    # not lowered by another CPU's rate
    assert fc.bottleneck["name"] == "input pipeline (estimate)"
    assert fc.bottleneck["evidence"].startswith("2 workers feed about 100 images/s (50 per core")
    assert f"below the GPU's {gpu:,.0f}: input-bound" in fc.bottleneck["evidence"]
    assert fc.loader["input_bound_images_per_s"] == pytest.approx(100.0)
    assert fc.loader["input_bound_epoch_s"] == pytest.approx(fc.schedule["iterations_per_epoch"] * 10 / 100.0)
    assert not fc.unknown   # the loading speed is estimated, not unknown
    fast = LoaderSample(1e9, "estimate from this CPU (recorded)", estimated=True)
    fc = forecast(plan, prof, _cost(), _device(), 10_000, 1, 64 * 2**30, CONSTANTS, fast, cores=4)
    assert fc.bottleneck["name"] in {"compute", "memory bandwidth"} and fc.loader["keeps_up"]


def test_a_measured_loader_still_lowers_the_forecast() -> None:
    plan, prof = _plan(sets=["loader.num_workers=2"])
    measured = LoaderSample(50.0, "--data (recorded)")
    fc = forecast(plan, prof, _cost(), _device(), 10_000, 1, 64 * 2**30, CONSTANTS, measured, cores=4)
    assert fc.speed["images_per_s"] == pytest.approx(100.0) and fc.bottleneck["name"] == "data loading"


def test_over_budget_loader_ram_is_the_bottleneck_with_its_fix_not_a_refusal() -> None:
    sets = ["loader.batch_size=1280"]
    with pytest.raises(UserError):   # train and profiles validate still refuse it
        presets.resolve("aws-a10g", sets=sets, env={})
    res = presets.resolve("aws-a10g", sets=sets, env={}, what_if=True)
    from fasttrain.estimate.gather import host_warning, plain_notes
    warning = host_warning(res)
    assert warning is not None and "over the budget" in warning.message and "loader.num_workers to 9" in warning.fix
    assert not any("over the budget" in n for n in plain_notes(res))
    plan, prof = _plan()
    fc = forecast(plan, prof, _cost(), _device(), 1000, 1, 64 * 2**30, CONSTANTS,
                  host_warning=HostWarning(warning.message, warning.fix))
    assert fc.bottleneck["name"] == "host RAM" and fc.bottleneck["fix"] == warning.fix
    assert fc.speed["images_per_s"] > 0    # the GPU is forecast all the same


def test_estimate_cli_forecasts_an_over_budget_plan(cli) -> None:
    r = cli("estimate", "--profile", "aws-a10g", "--model", "tiny_cnn", "--image-size", "224", "--num-classes", "10",
            "--gpu", "A100 80GB", "--set", "loader.batch_size=1280", "--json")
    assert r.code == 0, r.err
    f = json.loads(r.out)["forecast"]
    assert f["bottleneck"]["name"] == "host RAM" and "prefetch_factor to 2" in f["bottleneck"]["fix"]
    assert f["speed"]["images_per_s"] > 0 and f["cost"]["price_on_demand_per_hour"] == pytest.approx(2.45)


def test_decode_probe_measures_and_caches_per_cpu_and_versions(tmp_path, monkeypatch) -> None:
    jpegs = decode_rate.sample_jpegs(count=2, size=(64, 48))
    assert all(j[:2] == b"\xff\xd8" for j in jpegs)                        # real JPEG files
    rate = decode_rate.measure(16, AugmentSpec(), budget_s=0.02, jpegs=jpegs)
    assert rate > 0
    calls = []
    monkeypatch.setattr(decode_rate, "measure", lambda size, aug: calls.append(size) or 123.0)
    first = decode_rate.per_core_rate(16, AugmentSpec(), cache_dir=tmp_path)
    again = decode_rate.per_core_rate(16, AugmentSpec(), cache_dir=tmp_path)
    assert calls == [16] and first.images_per_s_per_worker == again.images_per_s_per_worker == 123.0
    assert first.estimated and "estimate from this CPU" in first.source
    monkeypatch.setattr(decode_rate, "cpu_name", lambda: "another CPU")
    decode_rate.per_core_rate(16, AugmentSpec(), cache_dir=tmp_path)
    assert calls == [16, 16]                                                 # another CPU: measured anew
