"""`fasttrain estimate` on real inputs: the training split of --data, batches larger than the data,
--set loader.num_workers=0, --measure labelled with its device, --gpu priced from the price file."""
from __future__ import annotations

import json
from pathlib import Path

TINY = ["--model", "tiny_cnn", "--image-size", "16", "--num-classes", "10"]


def _folder(root: Path, splits: dict[str, int], classes: tuple[str, ...] = ("a", "b")) -> Path:
    """root/<split>/<class>/*.png with `n` images per class ("" as split: class folders directly in root)."""
    from PIL import Image
    for split, n in splits.items():
        for cls in classes:
            d = root / split / cls
            d.mkdir(parents=True)
            for i in range(n):
                Image.new("RGB", (20, 20), (i * 5 % 255, 80, 120)).save(d / f"{i}.png")
    return root


def _json(result) -> dict:
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_data_counts_the_training_split_not_val(cli, tmp_path) -> None:
    data = _folder(tmp_path, {"train": 45, "val": 15})        # 90 training images, 30 validation
    d = _json(cli("estimate", "--profile", "kaggle-t4", *TINY, "--set", "loader.batch_size=32", "--data", str(data),
                  "--json"))
    assert d["forecast"]["schedule"]["dataset_size"] == 90
    assert d["forecast"]["schedule"]["iterations_per_epoch"] == 2
    assert "90 training images" in d["dataset_size_source"]


def test_data_in_one_tree_counts_what_train_keeps_after_its_split(cli, tmp_path) -> None:
    from fasttrain.datasets.image_folder import find_splits
    data = _folder(tmp_path, {"": 20})
    _classes, train, _val = find_splits(data, seed=0, val_fraction=0.1)
    d = _json(cli("estimate", "--profile", "kaggle-t4", *TINY, "--set", "loader.batch_size=4", "--data", str(data),
                  "--json"))
    assert d["forecast"]["schedule"]["dataset_size"] == len(train) == 36


def test_a_batch_larger_than_the_data_exits_2_like_train(cli, tmp_path) -> None:
    data = _folder(tmp_path, {"train": 45, "val": 15})
    r = cli("estimate", "--profile", "aws-a10g", "--model", "resnet18", "--data", str(data))
    assert r.code == 2 and "Traceback" not in r.err
    assert r.err.strip().splitlines() == [
        "fasttrain: error: loader.batch_size: larger than the 90 training samples, so an epoch has no full batch "
        "(got 256); lower it with --set loader.batch_size=N"]
    r = cli("estimate", "--profile", "aws-a10g", *TINY, "--dataset-size", "100")
    assert r.code == 2 and "larger than the 100 training samples" in r.err


def test_loader_words_never_print_none(cli, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("fasttrain.hardware.gpus._standins", dict)  # the A10G without its stand-in's peaks
    data = _folder(tmp_path, {"train": 45, "val": 15})
    r = cli("estimate", "--profile", "aws-a10g", *TINY, "--set", "loader.batch_size=32", "--data", str(data))
    assert r.code == 0, r.err
    assert "None" not in r.out and "iterations per epoch           0" not in r.out
    assert "compute speed unknown: cannot say whether it keeps up" in r.out   # the A10G has no tensor peak on file


def test_no_workers_accepts_the_presets_prefetch_and_persistent_with_a_note(cli) -> None:
    r = cli("estimate", "--profile", "aws-a10g", *TINY, "--set", "loader.num_workers=0")
    assert r.code == 0, r.err
    assert "note: loader.num_workers=0: prefetch_factor and persistent_workers ignored: no worker processes" in r.out
    d = _json(cli("estimate", "--profile", "aws-a10g", *TINY, "--set", "loader.num_workers=0", "--json"))
    assert any("ignored: no worker processes" in n for n in d["plan_notes"])
    assert d["forecast"]["loader"]["workers"] == 0


def test_no_workers_plan_and_dataloader_get_no_prefetch_or_persistent(tmp_path) -> None:
    """torch's DataLoader refuses prefetch_factor / persistent_workers without workers: the plan drops them."""
    import json as _j

    from conftest import FIXTURES

    from fasttrain.datasets.build import build_datasets
    from fasttrain.datasets.loaders import build_loaders
    from fasttrain.hardware.report import HardwareReport
    from fasttrain.plan import make_plan
    from fasttrain.profiles import presets
    res = presets.resolve("kaggle-t4", env={}, sets=["loader.num_workers=0", "loader.batch_size=4",
                                                     "loader.image_size=16", "loader.pin_memory=false"])
    assert [n.line() for n in res.notes] == [
        "loader.num_workers=0: prefetch_factor and persistent_workers ignored: no worker processes"]
    machine = HardwareReport.model_validate(_j.loads((FIXTURES / "reports" / "a10g.json").read_text()))
    plan = make_plan(res.profile, machine, dataset_size=18)
    assert plan.workers == 0 and plan.prefetch_factor is None and plan.persistent_workers is False
    bundle = build_datasets(str(_folder(tmp_path, {"": 10})), image_size=16, augment=res.profile.augment)
    train, _val = build_loaders(bundle, plan, seed=0)
    assert train.loader.num_workers == 0 and train.loader.prefetch_factor is None
    assert train.loader.persistent_workers is False
    assert next(iter(train))[0].shape[0] == 4


def test_measure_table_says_which_device_its_forecast_is_for(cli) -> None:
    r = cli("estimate", "--profile", "kaggle-t4", *TINY, "--set", "loader.batch_size=8", "--measure",
            "--measure-steps", "1")
    assert r.code == 0, r.err
    assert "on T4 (as the profile describes it)" in r.out
    from fasttrain.hardware import machine
    if machine.probe().training_gpu() is None:   # a CPU-only machine: the measurement runs on this CPU
        assert ("--measure: the forecast above is for T4; the steps run on this CPU, so the table below compares a "
                "forecast for this CPU with the measurement") in " ".join(r.out.split())
        assert "forecast for this CPU (the measurement runs here)" in r.out
        assert "forecast (this CPU)" in r.out
    assert r.out.index("bottleneck:") < r.out.index("--measure: the forecast above is for T4")


def test_measure_titles_are_plain_without_another_device() -> None:
    from fasttrain.estimate.view import measure_titles
    apart, title, column = measure_titles({"forecast_for": "this CPU"}, None)
    assert apart is None and title.startswith("forecast for this CPU (the measurement runs here)")
    assert column == "forecast (this CPU)"
    apart, _t, column = measure_titles({"forecast_for": "this machine's T4"}, "A100 80GB SXM4")
    assert apart.startswith("--measure: the forecast above is for A100 80GB SXM4; the steps run on this machine's T4")


def test_gpu_flag_is_priced_from_the_price_file_not_the_profile(cli) -> None:
    cost = _json(cli("estimate", "--profile", "aws-a10g", *TINY, "--gpu", "A100 80GB", "--json"))["forecast"]["cost"]
    assert cost["price_on_demand_per_hour"] == 2.45 and cost["price_spot_per_hour"] == 1.39   # not the A10G's 1.624
    assert cost["price_source"] == "data/gpu_prices.csv: RunPod, per GPU"
    r = cli("estimate", "--profile", "aws-a10g", *TINY, "--gpu", "A100 80GB")
    assert "at $2.45/h x 1 machine" in r.out and "$1.62/h" not in r.out
    four = _json(cli("estimate", "--profile", "aws-a10g", *TINY, "--gpu", "A100 80GB", "--set",
                     "world.gpus_per_node=4", "--json"))["forecast"]["cost"]
    assert four["price_on_demand_per_hour"] == 4 * 2.45   # a machine of 4 such GPUs


def test_a_gpu_without_a_price_row_is_priced_unknown(cli) -> None:
    d = _json(cli("estimate", "--profile", "aws-a10g", *TINY, "--gpu", "V100", "--json"))["forecast"]
    assert d["cost"]["price_on_demand_per_hour"] is None and d["cost"]["on_demand_per_run"] is None
    assert "hourly price of V100 SXM2 16GB (no row in data/gpu_prices.csv)" in d["unknown"]
    r = cli("estimate", "--profile", "aws-a10g", *TINY, "--gpu", "V100")
    assert "no hourly price for V100 SXM2 16GB" in r.out and "$1.62" not in r.out


def test_the_profiles_own_gpu_keeps_the_profiles_price(cli) -> None:
    for args in ([], ["--gpu", "A10G"]):
        cost = _json(cli("estimate", "--profile", "aws-a10g", *TINY, *args, "--json"))["forecast"]["cost"]
        assert cost["price_on_demand_per_hour"] == 1.624 and cost["price_source"] == "profile aws-a10g"


def test_compare_gpus_prices_each_gpu_from_the_file(cli) -> None:
    from fasttrain.estimate.prices import load_prices
    rows = _json(cli("estimate", "--profile", "aws-a10g", *TINY, "--compare", "gpus", "--json"))["compare"]["rows"]
    by_name = {r["name"]: r for r in rows}
    assert by_name["V100 SXM2 16GB"]["on_demand_per_run"] is None
    priced = [r for r in rows if r["on_demand_per_run"] is not None]
    assert {r["name"] for r in priced} <= set(load_prices()) | {"A10G (AWS g5)"}


def test_price_file_rows_name_known_gpus_and_cite_sources() -> None:
    from fasttrain.estimate.prices import GpuPrice, load_prices, machine_prices
    from fasttrain.hardware.gpus import gpu_names
    rows = load_prices()
    assert rows and set(rows) <= set(gpu_names())
    for row in rows.values():
        assert row.on_demand_per_hour is None or row.on_demand_per_hour > 0
        assert row.spot_per_hour is None or 0 < row.spot_per_hour <= (row.on_demand_per_hour or 1e9)
        assert "https://" in row.source and row.provider
    assert machine_prices(None, 8) == (None, None)
    assert machine_prices(GpuPrice("x", 2.0, None, "p", "s"), 4) == (8.0, None)
