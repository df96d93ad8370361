"""Small images are validated whole (issue 42, the recipe at 30,000 images): the rule, what the plan says, what a
real run writes into model.json, and the in-RAM validation pixels kept apart per crop."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from loop_helpers import DETERMINISTIC_PROFILE, write_image_folder

from fasttrain.datasets.val_crop import SMALL_SIDE, whole_image_note


def test_the_rule_validates_small_images_whole_and_keeps_the_crop_for_larger_ones() -> None:
    note = whole_image_note([28] * 50, 0.875)
    assert note is not None and "the images are 28 px, at most 64" in note
    assert "--set augment.val_crop_pct=0.875 to keep the crop" in note
    assert whole_image_note([SMALL_SIDE] * 3, 0.875) is not None
    assert whole_image_note([SMALL_SIDE + 1] * 3, 0.875) is None     # photographs keep timm's crop
    assert whole_image_note([28, 28, 500, 500, 500], 0.875) is None   # the median decides, not one file
    assert whole_image_note([28] * 5, 1.0) is None                    # nothing to change
    assert whole_image_note([], 0.875) is None                        # nothing read


def test_the_plan_says_so_and_the_users_crop_stays(cli, tmp_path: Path) -> None:
    small = write_image_folder(tmp_path / "small", size=28)
    large = write_image_folder(tmp_path / "large", size=96)
    res = cli("train", "--data", str(small), "--model", "tiny_cnn", "--dry-run", "--json")
    assert res.code == 0, res.err
    view = json.loads(res.out)
    assert any(n.startswith("augment: validation sees the whole image (val_crop_pct 1.0, not 0.875)")
               for n in view["notes"]), view["notes"]
    assert "(whole image)" in view["recipe"]
    mine = cli("train", "--data", str(small), "--model", "tiny_cnn", "--dry-run", "--json",
               "--set", "augment.val_crop_pct=0.875")
    assert mine.code == 0 and "validation sees the whole image" not in mine.out
    assert "(centre crop 0.875)" in json.loads(mine.out)["recipe"]
    kept = cli("train", "--data", str(large), "--model", "tiny_cnn", "--dry-run", "--json")
    assert kept.code == 0 and "validation sees the whole image" not in kept.out
    assert "(centre crop 0.875)" in json.loads(kept.out)["recipe"]


def test_a_real_run_writes_the_crop_its_validation_used_into_model_json(cli, tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """predict and load_trained read model.json's crop_pct: a prediction sees the pixels validation saw."""
    monkeypatch.chdir(tmp_path)
    write_image_folder(tmp_path / "data", size=28)
    (tmp_path / "tiny.yaml").write_text(DETERMINISTIC_PROFILE)
    res = cli("train", "--profile", "tiny.yaml", "--data", "data", "--model", "tiny_cnn", "--epochs", "1",
              "--runs-dir", "runs", "--run-name", "whole", "--no-tune", "--quiet")
    assert res.code == 0, res.err
    meta = json.loads((tmp_path / "runs" / "whole" / "model.json").read_text())
    assert meta["crop_pct"] == 1.0
    predicted = cli("predict", "runs/whole", "--data", "data/val", "--out", "preds.csv")
    assert predicted.code == 0, predicted.err
    import csv
    rows = list(csv.DictReader((tmp_path / "preds.csv").open()))
    assert len(rows) == 12
    right = sum(Path(r["file"]).parent.name == r["class"] for r in rows)
    assert right / len(rows) == pytest.approx(meta["val_acc1"])   # the pixels validation scored


def test_validation_pixels_are_cached_per_crop(tmp_path: Path) -> None:
    """The in-RAM validation pixels are kept at the crop: a run at another crop must not read them back."""
    import torch

    from fasttrain.datasets.decoded import DecodeBudget, open_decoded
    from fasttrain.datasets.image_folder import find_splits

    root = write_image_folder(tmp_path / "data", classes=2, train_per_class=2, val_per_class=3, size=40)
    _, _, val = find_splits(root, seed=0, val_fraction=0.2)
    budget = DecodeBudget(ram_bytes=1 << 30, cache_dir=tmp_path / "cache", threads=1)
    sets = {}
    for crop in (0.875, 1.0):
        opened = open_decoded(val, 32, None, budget.ram_bytes, budget, crop_pct=crop)
        assert not isinstance(opened, str)
        opened.pass_done()   # decodes what no batch drew, then saves the pixels for later runs
        sets[crop] = opened.pixels.clone()
    again = open_decoded(val, 32, None, budget.ram_bytes, budget, crop_pct=1.0)
    assert not isinstance(again, str) and again.saved
    assert torch.equal(again.pixels, sets[1.0])
    assert not torch.equal(sets[0.875], sets[1.0])
