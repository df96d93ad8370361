"""build_datasets: every kind of --data spec, and every bad input as a one-line UserError."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from image_tree import write_corrupt, write_png, write_tree

from fasttrain.core.errors import UserError
from fasttrain.datasets.build import SyntheticBatches, build_datasets
from fasttrain.datasets.bundle import BadSample
from fasttrain.profiles.schema import AugmentSpec

AUG = AugmentSpec(random_resized_crop_scale=(0.6, 1.0))


def build(spec: str | Path, **kw):
    return build_datasets(str(spec), image_size=16, augment=AUG, **kw)


def _error(spec: str | Path, **kw) -> str:
    with pytest.raises(UserError) as info:
        build(spec, **kw)
    assert len(info.value.lines()) == 1
    return info.value.lines()[0]


def test_train_and_val_folders(tmp_path: Path) -> None:
    write_tree(tmp_path / "train", {"cat": 3, "dog": 2})
    write_tree(tmp_path / "val", {"cat": 1, "dog": 1}, seed=1)
    bundle = build(tmp_path)
    assert bundle.kind == "images" and bundle.class_names == ["cat", "dog"] and bundle.num_classes == 2
    assert (bundle.train_size, bundle.val_size) == (5, 2)
    image, target = bundle.train[0]
    assert tuple(image.shape) == (3, 16, 16) and target == 0
    assert bundle.val[1][1] == 1


def test_one_tree_split_by_seeded_fraction(tmp_path: Path) -> None:
    write_tree(tmp_path, {"a": 10, "b": 10, "c": 10})
    first = build(tmp_path, seed=5, val_fraction=0.2)
    again = build(tmp_path, seed=5, val_fraction=0.2)
    other = build(tmp_path, seed=6, val_fraction=0.2)
    assert first.val.samples == again.val.samples and first.train.samples == again.train.samples
    assert first.val.samples != other.val.samples
    assert (first.train_size, first.val_size) == (24, 6)
    assert sorted(t for _, t in first.val.samples) == [0, 0, 1, 1, 2, 2]  # stratified: 2 per class
    assert not {p for p, _ in first.train.samples} & {p for p, _ in first.val.samples}


def test_train_folder_without_val_is_split(tmp_path: Path) -> None:
    write_tree(tmp_path / "train", {"a": 4, "b": 4})
    bundle = build(tmp_path, val_fraction=0.25)
    assert (bundle.train_size, bundle.val_size) == (6, 2)


def test_missing_dir(tmp_path: Path) -> None:
    line = _error(tmp_path / "nope")
    assert "--data" in line and "does not exist" in line and "nope" in line


def test_dir_without_images(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "notes.txt").write_text("x")
    assert "no images" in _error(tmp_path)


def test_dir_without_class_folders(tmp_path: Path) -> None:
    write_png(tmp_path / "loose.png", seed=1)
    assert "no class folders" in _error(tmp_path)


def test_empty_class_folders_are_named(tmp_path: Path) -> None:
    write_tree(tmp_path, {"full": 3})
    (tmp_path / "empty1").mkdir()
    (tmp_path / "empty2").mkdir()
    line = _error(tmp_path)
    assert "empty class folders" in line and "empty1, empty2" in line and "full" not in line.split(":")[-2]


def test_val_classes_differ_from_train(tmp_path: Path) -> None:
    write_tree(tmp_path / "train", {"a": 2, "b": 2})
    write_tree(tmp_path / "val", {"a": 1, "c": 1})
    line = _error(tmp_path)
    assert "only in train/: b" in line and "only in val/: c" in line


def test_unknown_spec() -> None:
    line = _error("imagenet")
    assert "imagenet" in line and "shapes" in line


def test_corrupt_file_gives_bad_sample(tmp_path: Path) -> None:
    write_tree(tmp_path, {"a": 3, "b": 3})
    bad = write_corrupt(tmp_path / "a" / "zz_broken.png")
    bundle = build(tmp_path, val_fraction=0.5)
    found = [bundle.train[i] for i in range(len(bundle.train))] + [bundle.val[i] for i in range(len(bundle.val))]
    bads = [s for s in found if isinstance(s, BadSample)]
    assert [b.path for b in bads] == [str(bad)] and bads[0].reason


def test_shapes_spec_uses_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fasttrain.datasets import shapes

    monkeypatch.setenv("FASTTRAIN_CACHE", str(tmp_path))
    monkeypatch.setattr(shapes, "DEFAULT_SPEC", shapes.ShapesSpec(image_size=16, train_per_class=2, val_per_class=1))
    bundle = build("shapes")
    assert bundle.num_classes == len(shapes.CLASSES) and bundle.source == "shapes"
    assert (bundle.train_size, bundle.val_size) == (2 * len(shapes.CLASSES), len(shapes.CLASSES))
    assert str(tmp_path) in bundle.train.samples[0][0]


def test_synthetic_batches_on_device() -> None:
    bundle = build("synthetic", num_classes=7)
    assert bundle.kind == "synthetic" and bundle.train is None and bundle.num_classes == 7
    batches = list(SyntheticBatches(4, 16, 7, "cpu", steps=6, seed=0))
    assert len(batches) == 6
    images, targets = batches[0]
    assert tuple(images.shape) == (4, 3, 16, 16) and int(targets.max()) < 7
    assert not (batches[0][0] == batches[1][0]).all()


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A module of the user's own datasets (feature sequences, as in the Kaggle note)."""
    (tmp_path / "mydata.py").write_text(textwrap.dedent("""
        import torch
        from torch.utils.data import TensorDataset

        def seqs():
            g = torch.Generator().manual_seed(0)
            x = torch.randn(20, 5, 3, generator=g)
            return TensorDataset(x, torch.arange(20) % 4), TensorDataset(x[:6], torch.arange(6) % 4)

        def with_count():
            train, val = seqs()
            return train, val, 6

        class Regression(torch.utils.data.Dataset):
            def __len__(self): return 4
            def __getitem__(self, i): return torch.zeros(2), 0.5

        def floats():
            return Regression(), Regression()

        class Soft(torch.utils.data.Dataset):
            def __len__(self): return 4
            def __getitem__(self, i): return torch.zeros(2), torch.tensor([0.25, 0.75, 0.0])

        def soft():
            return Soft(), Soft()

        def wrong():
            return {"train": 1}
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "mydata"
    sys.modules.pop("mydata", None)


def test_module_callable(user_module: str) -> None:
    bundle = build(f"{user_module}:seqs")
    assert bundle.kind == "custom" and bundle.num_classes == 4 and (bundle.train_size, bundle.val_size) == (20, 6)
    assert build(f"{user_module}:with_count").num_classes == 6


def test_module_callable_errors(user_module: str) -> None:
    assert "label is a float, not a class index" in _error(f"{user_module}:floats")  # cross-entropy cannot
    assert "cannot tell how many classes" in _error(f"{user_module}:soft")  # class probabilities: count unknown
    assert build(f"{user_module}:soft", num_classes=3).num_classes == 3
    assert "returned dict" in _error(f"{user_module}:wrong")
    assert "no callable" in _error(f"{user_module}:missing")
