"""The built-in shapes set: deterministic bytes, ImageFolder layout, cache reuse and atomic generation."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from fasttrain.datasets import shapes
from fasttrain.datasets.shapes import CLASSES, ShapesSpec, ensure_shapes

SMALL = ShapesSpec(image_size=16, train_per_class=2, val_per_class=1)


def _digest(tree: Path) -> dict[str, str]:
    return {str(p.relative_to(tree)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(tree.rglob("*.png"))}


def test_layout_and_sizes(tmp_path: Path) -> None:
    from PIL import Image

    root = ensure_shapes(tmp_path, seed=0, spec=SMALL)
    for split, per_class in (("train", 2), ("val", 1)):
        for name in CLASSES:
            files = sorted((root / split / name).glob("*.png"))
            assert len(files) == per_class
            with Image.open(files[0]) as image:
                assert image.size == (16, 16) and image.mode == "RGB"


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    a = _digest(ensure_shapes(tmp_path / "a", seed=3, spec=SMALL))
    b = _digest(ensure_shapes(tmp_path / "b", seed=3, spec=SMALL))
    c = _digest(ensure_shapes(tmp_path / "c", seed=4, spec=SMALL))
    assert a == b
    assert a.keys() == c.keys() and a != c


def test_cached_set_is_reused_and_key_follows_parameters(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = ensure_shapes(tmp_path, seed=0, spec=SMALL)
    monkeypatch.setattr(shapes, "write_shapes", lambda *a, **k: pytest.fail("regenerated a cached set"))
    assert ensure_shapes(tmp_path, seed=0, spec=SMALL) == first
    assert SMALL.key(0) != ShapesSpec(image_size=16, train_per_class=3, val_per_class=1).key(0)
    assert SMALL.key(0) != SMALL.key(1)


def test_default_cache_dir_follows_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTTRAIN_CACHE", str(tmp_path / "cache"))
    assert ensure_shapes(seed=0, spec=SMALL).parent == tmp_path / "cache"


def test_killed_generation_leaves_no_half_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_draw = shapes.draw_image
    calls = []

    def dying_draw(*args, **kwargs):
        calls.append(1)
        if len(calls) > 5:
            raise KeyboardInterrupt  # what Ctrl-C does mid-generation
        return real_draw(*args, **kwargs)

    monkeypatch.setattr(shapes, "draw_image", dying_draw)
    with pytest.raises(KeyboardInterrupt):
        ensure_shapes(tmp_path, seed=0, spec=SMALL)
    assert list(tmp_path.iterdir()) == []  # neither the final directory nor the temporary one
    monkeypatch.setattr(shapes, "draw_image", real_draw)
    root = ensure_shapes(tmp_path, seed=0, spec=SMALL)
    assert len(list(root.rglob("*.png"))) == 3 * len(CLASSES)


def test_classes_differ_visibly() -> None:
    """Two classes drawn with the same random draws differ in pixels: the label is in the image."""
    import numpy as np

    spec = ShapesSpec(image_size=32, noise=0.0, clutter=0)
    images = [np.asarray(shapes.draw_image(label, seed=0, split="train", index=0, spec=spec), dtype=np.int16)
              for label in range(len(CLASSES))]
    for i in range(len(images)):
        for j in range(i + 1, len(images)):
            assert np.abs(images[i] - images[j]).sum() > 0, (CLASSES[i], CLASSES[j])
