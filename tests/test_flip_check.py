"""Flips measured against the data (datasets/flip_check.py): a preset's flips go for classes with a handedness
(digits, letters), stay for mirror-symmetric ones and for data the test cannot read; the user's choice stays."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from fasttrain.datasets.flip_check import mirror_test, sample_thumbs


def _handed(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Class 0 is bright on the left, class 1 on the right, class 2 a bright bar on the left third: mirrored,
    0 and 1 swap and 2 becomes a class of its own."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    x = rng.normal(0, 20, (n, 16, 16)) + 100
    for i, c in enumerate(y):
        if c == 0:
            x[i, :, :8] += 80
        elif c == 1:
            x[i, :, 8:] += 80
        else:
            x[i, :, :5] += 120
    return x, y


def _symmetric(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A centred square, a centred ring, a centred cross: mirror images of themselves."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, n)
    x = rng.normal(0, 20, (n, 16, 16)) + 100
    for i, c in enumerate(y):
        if c == 0:
            x[i, 5:11, 5:11] += 80
        elif c == 1:
            x[i, 3:13, 3:13] += 80
            x[i, 5:11, 5:11] -= 80
        else:
            x[i, 7:9, :] += 80
            x[i, :, 7:9] += 80
    return x, y


def test_handed_classes_are_found_and_symmetric_ones_are_not() -> None:
    handed = mirror_test(*_handed(600), classes=3)
    assert handed.handed and handed.accuracy > 0.9 and handed.mirrored < 0.5
    symmetric = mirror_test(*_symmetric(600), classes=3)
    assert not symmetric.handed and symmetric.accuracy > 0.9


def test_recorded_tests_of_real_data_decide_as_measured() -> None:
    """The mirror test's own figures on real data (512 held-out thumbnails each, 10 classes): scikit-learn's
    digits are handed; scikit-image's photographs, where the classifier reads a little layout and a mirror costs
    a few points, are not (flips and a mirrored validation reach 85% an epoch sooner there)."""
    from fasttrain.datasets.flip_check import MirrorTest
    assert MirrorTest(0.904, 0.342, 0.1, 512).handed       # digits, seed 0
    assert MirrorTest(0.885, 0.322, 0.1, 512).handed       # digits, seed 2
    assert not MirrorTest(0.244, 0.160, 0.1, 512).handed   # photos, seed 0 (3.9 sigmas and 58% of 14 points)
    assert not MirrorTest(0.225, 0.162, 0.1, 512).handed   # photos, seed 2
    assert MirrorTest(0.45, 0.28, 1 / 26, 512).handed      # a weaker reader of a handed set still counts: 17 points


def test_noise_the_classifier_cannot_read_is_no_evidence_against_flips() -> None:
    rng = np.random.default_rng(1)
    test = mirror_test(rng.normal(size=(600, 16, 16)), rng.integers(0, 10, 600), classes=10)
    assert not test.handed
    assert not mirror_test(np.zeros((0, 16, 16)), np.zeros(0, dtype=int), classes=3).handed  # nothing readable


def _folder(root: Path, maker) -> Path:
    x, y = maker(240)
    for i, (pixels, c) in enumerate(zip(x, y, strict=True)):
        folder = root / "train" / f"class{c}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(pixels, 0, 255).astype("uint8")).resize((32, 32)).convert("RGB").save(
            folder / f"{i}.png"
        )
        if i % 4 == 0:
            (root / "val" / f"class{c}").mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.clip(pixels, 0, 255).astype("uint8")).convert("RGB").save(
                root / "val" / f"class{c}" / f"{i}.png"
            )
    return root


def test_thumbnails_come_from_the_real_files_and_skip_broken_ones(tmp_path: Path) -> None:
    data = _folder(tmp_path / "d", _handed)
    from fasttrain.datasets.image_folder import find_splits

    classes, train, _ = find_splits(data, seed=0, val_fraction=0.1)
    (data / "train" / "class0" / "broken.png").write_bytes(b"not a png")
    train.append((str(data / "train" / "class0" / "broken.png"), 0))
    thumbs, labels = sample_thumbs(train, n=10_000)
    assert thumbs.shape == (len(train) - 1, 16, 16) and len(labels) == len(thumbs)
    assert mirror_test(thumbs, labels, len(classes)).handed


def test_train_turns_a_presets_flips_off_for_handed_data_and_says_so(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed = _folder(tmp_path / "handed", _handed)
    symmetric = _folder(tmp_path / "symmetric", _symmetric)
    monkeypatch.chdir(tmp_path)
    res = cli("train", "--data", str(handed), "--model", "tiny_cnn", "--dry-run", "--json")
    assert res.code == 0, res.err
    import json

    view = json.loads(res.out)
    assert any(n.startswith("augment: flips off, the classes look handed") for n in view["notes"])
    assert view["recipe"].endswith(
        "no flips, validation as is (whole image), batch norms re-estimated on 256 training images before it"
    )  # no mirrored validation either
    mine = cli("train", "--data", str(handed), "--model", "tiny_cnn", "--dry-run", "--set", "augment.hflip=0.5")
    assert mine.code == 0 and "augment.hflip=0.5 (yours) mirrors images whose classes look handed" in mine.out
    plain = cli("train", "--data", str(symmetric), "--model", "tiny_cnn", "--dry-run")
    assert plain.code == 0 and "flips off" not in plain.out and "look handed" not in plain.out
    recipe = next(line for line in plain.out.splitlines() if line.startswith("recipe "))
    assert "label smoothing 0.1" in recipe and recipe.endswith(
        "flips 0.5, validation with mirror images (whole image), batch norms re-estimated on 256 training images "
        "before it"
    )


def test_test_time_flip_averages_each_images_logits_with_its_mirror_images() -> None:
    """augment.test_flip: validation scores each image by the mean of its logits and its mirror image's, for a
    real model that tells them apart (a linear layer over the pixels)."""
    import torch
    from loop_helpers import cpu_plan
    from torch import nn

    from fasttrain.train.loop.step import StepEngine
    from fasttrain.train.loop.validation import evaluate

    torch.manual_seed(0)
    plan, profile = cpu_plan(speed={"precision": "fp32", "compile": False})
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 4))
    optim = profile.optim.model_copy(update={"ema_decay": None})
    engine = StepEngine.build(plan, optim, model, batches_per_epoch=1)
    images, targets = torch.randn(16, 3, 8, 8), torch.randint(0, 4, (16,))
    with torch.no_grad():
        plain, mirrored = model(images), model(images.flip(-1))
    assert not torch.allclose(plain, mirrored)  # the model is not mirror-invariant: the flip must show
    expect = {
        name: nn.functional.cross_entropy(logits, targets).item()
        for name, logits in (("plain", plain), ("averaged", (plain + mirrored) / 2))
    }
    once = evaluate(engine, [(images, targets)])
    both = evaluate(engine, [(images, targets)], test_flip=True)
    assert once["val_loss"] == pytest.approx(expect["plain"], rel=1e-5)
    assert both["val_loss"] == pytest.approx(expect["averaged"], rel=1e-5)
    assert both["val_acc1"] == ((plain + mirrored).argmax(1) == targets).float().mean().item()


def test_estimate_with_data_runs_trains_flip_check_and_prices_validation_as_train_runs_it(cli, tmp_path: Path) -> None:
    """`estimate --data` reads the folder as `train` does: flips off for handed classes (the same note), so each
    epoch's validation is priced unmirrored; symmetric classes keep the preset's mirrored validation."""
    import json

    handed = _folder(tmp_path / "handed", _handed)
    symmetric = _folder(tmp_path / "symmetric", _symmetric)
    args = ("estimate", "--model", "tiny_cnn", "--profile", "cpu", "--image-size", "32", "--epochs", "1", "--json")
    out = json.loads(cli(*args, "--data", str(handed)).out)
    assert any(n.startswith("augment: flips off, the classes look handed") for n in out["plan_notes"])
    assert out["forecast"]["time"]["val_mirrored"] is False and out["forecast"]["time"]["val_images"] == 60
    kept = json.loads(cli(*args, "--data", str(symmetric)).out)
    assert not any("look handed" in n for n in kept["plan_notes"])
    assert kept["forecast"]["time"]["val_mirrored"] is True
    assert kept["forecast"]["time"]["val_s"] == pytest.approx(2 * out["forecast"]["time"]["val_s"], rel=0.5)


def test_a_prepared_set_gets_the_same_checks_from_its_shards(
    cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`fasttrain data prepare` turns the folders into tar shards; train and estimate then sample the shards'
    members for the checks, so handed classes lose the preset's flips there too (before, a prepared set kept
    them), symmetric ones keep them, and a damaged shard leaves the preset as it is for loading to report."""
    import json

    handed, symmetric = _folder(tmp_path / "handed", _handed), _folder(tmp_path / "symmetric", _symmetric)
    monkeypatch.chdir(tmp_path)
    for src in (handed, symmetric):
        res = cli("data", "prepare", str(src), "--out", str(tmp_path / f"{src.name}-shards"), "--image-size", "32")
        assert res.code == 0, res.err
    shards = tmp_path / "handed-shards"
    res = cli("train", "--data", str(shards), "--model", "tiny_cnn", "--dry-run", "--json")
    assert res.code == 0, res.err
    view = json.loads(res.out)
    assert any(n.startswith("augment: flips off, the classes look handed") for n in view["notes"])
    assert view["recipe"].endswith(
        "no flips, validation as is (whole image), batch norms re-estimated on 256 training images before it"
    )
    # and it trains so: no flip left after the crop (torchvision refused an empty Compose on the shard path)
    run = cli(
        "train",
        "--data",
        str(shards),
        "--model",
        "tiny_cnn",
        "--epochs",
        "1",
        "--set",
        "loader.batch_size=16",
        "--no-tune",
        "--json",
        "--run-name",
        "handed",
    )
    assert run.code == 0, run.err
    assert json.loads(run.out)["epochs_run"] == 1
    est = cli(
        "estimate",
        "--model",
        "tiny_cnn",
        "--profile",
        "cpu",
        "--image-size",
        "32",
        "--epochs",
        "1",
        "--json",
        "--data",
        str(shards),
    )
    assert est.code == 0, est.err
    assert json.loads(est.out)["forecast"]["time"]["val_mirrored"] is False
    kept = cli("train", "--data", str(tmp_path / "symmetric-shards"), "--model", "tiny_cnn", "--dry-run")
    assert kept.code == 0 and "look handed" not in kept.out
    assert next(line for line in kept.out.splitlines() if line.startswith("recipe ")).endswith(
        "flips 0.5, validation with mirror images (whole image), batch norms re-estimated on 256 training images "
        "before it"
    )
    for tar in shards.glob("train-*.tar"):
        tar.write_bytes(b"\0" * 10 + b"not a tar" * 100)
    res = cli("train", "--data", str(shards), "--model", "tiny_cnn", "--dry-run")
    assert res.code == 2 and "a shard cannot be read" in res.err and "Traceback" not in res.out + res.err
