"""The forecast prices each epoch's validation: the model's forward ops at the validation batch, twice when each
image is also validated mirrored; the total and the money include it, and so does what a time budget buys."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_estimate import CEIL, CONSTANTS, _device, _plan

from fasttrain.estimate import gather
from fasttrain.estimate.cost import ModelCost, OpCost
from fasttrain.estimate.forecast import forecast, norm_images
from fasttrain.estimate.result import budget_buys
from fasttrain.estimate.roofline import OpTable, step_time, validation_time

# the forward pass (a conv and a batch norm), then the backward (the conv's gradients, twice its FLOPs)
FORWARD = [OpCost("convolution", 1e9, 1e6, 0.0), OpCost("batch_norm", 0.0, 4e7, 0.0)]
BACKWARD = [OpCost("convolution_backward", 2e9, 2e6, 0.0)]


def _cost(forward_ops: int | None = 2) -> ModelCost:
    return ModelCost(model="hand", image_size=32, num_classes=10, dtype="float32", params=1_000_000,
                     param_bytes=4_000_000, forward_flops_per_sample=1e9, train_flops_per_sample=3e9,
                     activation_bytes_per_sample=1e6, ops=FORWARD + BACKWARD, forward_ops=forward_ops)


def test_validation_is_the_forward_ops_per_batch_the_last_one_partial_and_mirrored_twice() -> None:
    table = OpTable.from_ops(FORWARD)
    per_10 = step_time(table, 10, CEIL, params=0).seconds      # 0.02 s conv + 0.008 s batch norm
    per_5 = step_time(table, 5, CEIL, params=0).seconds
    assert per_10 == pytest.approx(0.028)
    assert validation_time(table, 25, 10, CEIL) == pytest.approx(2 * per_10 + per_5)
    assert validation_time(table, 25, 10, CEIL, mirrored=True) == pytest.approx(2 * (2 * per_10 + per_5))
    assert validation_time(table, 0, 10, CEIL) == 0.0


def test_the_total_and_the_price_include_each_epochs_validation() -> None:
    plan, prof = _plan(["hardware.price_on_demand_per_hour=3.6", "augment.test_flip=false",
                        "optim.precise_bn_images=0"])
    fc = forecast(plan, prof, _cost(), _device(), dataset_size=1005, epochs=2, host_ram_bytes=64 * 2**30,
                  constants=CONSTANTS, val_size=100)
    val = 10 * 0.028                                            # 10 batches of 10, forward only, no optimizer
    assert fc.time["val_s"] == pytest.approx(val) and fc.time["val_images"] == 100
    assert fc.time["total_s"] == pytest.approx(2 * (fc.time["epoch_s"] + val))
    assert fc.cost["on_demand_per_epoch"] == pytest.approx((fc.time["epoch_s"] + val) / 3600 * 3.6)
    mirrored = forecast(plan, _plan(["augment.test_flip=true", "augment.hflip=0.5", "optim.precise_bn_images=0"])[1],
                        _cost(), _device(),
                        dataset_size=1005, epochs=2, host_ram_bytes=64 * 2**30, constants=CONSTANTS, val_size=100)
    assert mirrored.time["val_s"] == pytest.approx(2 * val) and mirrored.time["val_mirrored"]


def test_the_batch_norm_re_estimate_is_priced_as_forward_passes_over_whole_training_batches() -> None:
    """Validation first runs the epoch's last training batches forward (train/loop/norm_stats.py): the fewest whole
    batches holding optim.precise_bn_images, only for a model with batch norm."""
    assert norm_images(256, 64, True) == 256 and norm_images(256, 100, True) == 300 and norm_images(10, 64, True) == 64
    assert norm_images(0, 64, True) == 0 and norm_images(256, 64, False) == 0
    plan, prof = _plan(["augment.test_flip=false", "optim.precise_bn_images=25"])
    fc = forecast(plan, prof, _cost(), _device(), dataset_size=1005, epochs=2, host_ram_bytes=64 * 2**30,
                  constants=CONSTANTS, val_size=100)
    table, batch = OpTable.from_ops(FORWARD), plan.batch_size
    extra = validation_time(table, norm_images(25, batch, True), batch, CEIL)
    assert extra > 0 and fc.time["val_s"] == pytest.approx(validation_time(table, 100, batch, CEIL) + extra)
    plain = ModelCost(**{**_cost().__dict__, "ops": [FORWARD[0], *BACKWARD], "forward_ops": 1})  # no batch norm
    bare = forecast(plan, prof, plain, _device(), dataset_size=1005, epochs=2, host_ram_bytes=64 * 2**30,
                    constants=CONSTANTS, val_size=100)
    assert bare.time["val_s"] == pytest.approx(validation_time(OpTable.from_ops(FORWARD[:1]), 100, batch, CEIL))


def test_unknown_validation_is_left_out_and_said() -> None:
    plan, prof = _plan()
    for cost, val_size in ((_cost(), None), (_cost(forward_ops=None), 100)):
        fc = forecast(plan, prof, cost, _device(), dataset_size=1005, epochs=2, host_ram_bytes=64 * 2**30,
                      constants=CONSTANTS, val_size=val_size)
        assert fc.time["val_s"] is None and fc.time["total_s"] == pytest.approx(2 * fc.time["epoch_s"])


def test_a_time_budget_buys_epochs_with_their_validation() -> None:
    plan, prof = _plan(["augment.test_flip=false"])
    fc = forecast(plan, prof, _cost(), _device(), dataset_size=1005, epochs=2, host_ram_bytes=64 * 2**30,
                  constants=CONSTANTS, val_size=100)
    buys = budget_buys(60.0, fc)
    assert buys["epoch_s"] == pytest.approx(fc.time["epoch_s"] + fc.time["val_s"])
    assert buys["epochs"] == pytest.approx(60.0 / buys["epoch_s"])


def test_the_validation_images_without_data() -> None:
    assert gather.val_size_for(None) == 50_000                  # ImageNet-1k val beside its train default
    assert gather.val_size_for(9_000) == 1_000                  # the 10% train splits off a folder without val/


def test_estimate_with_data_validates_the_folders_val_split(cli, tmp_path: Path) -> None:
    """A real folder with a val/ of 6 images and a real model's forward ops: the JSON and the table say so."""
    from image_tree import write_tree
    write_tree(tmp_path / "d" / "train", {"a": 20, "b": 20})
    write_tree(tmp_path / "d" / "val", {"a": 3, "b": 3}, seed=1)
    args = ("estimate", "--model", "tiny_cnn", "--profile", "cpu", "--image-size", "16", "--epochs", "2",
            "--data", str(tmp_path / "d"), "--set", "loader.batch_size=4")
    res = cli(*args, "--json")
    assert res.code == 0, res.err
    t = json.loads(res.out)["forecast"]["time"]
    assert t["val_images"] == 6 and t["val_s"] > 0 and t["val_mirrored"]   # the cpu preset's shapes flips
    assert t["total_s"] == pytest.approx(2 * (t["epoch_s"] + t["val_s"]))
    table = cli(*args)
    assert table.code == 0, table.err
    assert "each epoch: 6 images, each also mirrored" in table.out and "each with its validation" in table.out
