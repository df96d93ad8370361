"""Images decoded once into RAM and augmented a batch at a time (datasets/decoded.py, datasets/batch_augment.py):
the batched transforms against torchvision's per-image ones, per-image randomness whatever the batch, the cache
of decoded pixels (key, reuse, invalidation, a full disk), corrupt files, and the plan's choice."""
from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from image_tree import write_corrupt, write_tree

from fasttrain.datasets import batch_augment as ba
from fasttrain.datasets.decoded import DecodeBudget, decode_splits, fit_reason, unbatched_augment
from fasttrain.datasets.decoded_images import DecodedImages
from fasttrain.datasets.pixel_cache import load_pixels, save_pixels
from fasttrain.profiles.schema import AugmentSpec

MIB = 2**20
CROP = AugmentSpec(random_resized_crop_scale=(0.6, 1.0), hflip=0.5)


def _samples(root: Path) -> list[tuple[str, int]]:
    return [(str(p), i % 2) for i, p in enumerate(sorted(root.rglob("*.png")))]


def _open(root: Path, cache: Path | None, augment: AugmentSpec = CROP) -> tuple[DecodedImages, DecodedImages, str]:
    samples = _samples(root)
    out = decode_splits(samples[:-4], samples[-4:], 24, augment, DecodeBudget(64 * MIB, cache, threads=2))
    assert not isinstance(out, str), out
    return out


# -- the batched transforms ---------------------------------------------------------------------------------------
def test_crop_boxes_follow_random_resized_crop() -> None:
    sizes = torch.tensor([[32, 32], [20, 50], [64, 16]] * 400, dtype=torch.int32)
    boxes = ba.random_crop_boxes(sizes, (0.25, 1.0), ba.uniforms(np.arange(len(sizes), dtype=np.uint64)))
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    height, width = sizes[:, 0].float(), sizes[:, 1].float()
    assert (boxes[:, 0] >= 0).all() and (boxes[:, 1] >= 0).all()
    assert (boxes[:, 2] <= width).all() and (boxes[:, 3] <= height).all() and (w >= 1).all() and (h >= 1).all()
    share = w * h / (width * height)
    assert share.min() > 0.2 and share.max() <= 1.0     # rounding may take a crop a little under the scale
    ratio = w / h
    assert ratio.min() > 0.7 and ratio.max() < 1.45
    # the same distribution as torchvision's own draws (mean area share over 1,200 crops of a 32 x 32 image)
    from torchvision.transforms import v2
    rrc = v2.RandomResizedCrop(24, scale=(0.25, 1.0))
    torch.manual_seed(0)
    theirs = [(lambda p: p["height"] * p["width"] / 1024)(rrc.make_params([torch.zeros(3, 32, 32)]))
              for _ in range(1200)]
    ours = share[0::3]
    assert float(ours.mean()) == pytest.approx(float(np.mean(theirs)), abs=0.03)


def test_a_crop_that_never_fits_falls_back_to_a_centre_crop_with_the_ratio_clamped() -> None:
    sizes = torch.tensor([[4, 100]], dtype=torch.int32)  # 25:1: no crop of ratio <= 4/3 keeps >= 90% of it
    boxes = ba.random_crop_boxes(sizes, (0.9, 1.0), ba.uniforms(np.array([7], dtype=np.uint64)))
    assert boxes.tolist() == [[47.0, 0.0, 52.0, 4.0]]  # round(4 * 4/3) = 5 wide, centred


def test_validation_batch_matches_torchvision_per_image(tmp_path: Path) -> None:
    from PIL import Image

    from fasttrain.datasets.transforms import val_transform
    rng = np.random.default_rng(0)
    smooth = np.kron(rng.integers(0, 256, size=(10, 14, 3)), np.ones((4, 4, 1))).astype(np.uint8)  # 40 x 56
    image = Image.fromarray(smooth)
    theirs = val_transform(32)(image)
    pixels = torch.from_numpy(smooth).permute(2, 0, 1).unsqueeze(0).contiguous()
    ours = ba.val_batch(pixels, torch.tensor([[40, 56]], dtype=torch.int32), 32)[0]
    assert ours.shape == theirs.shape
    assert float((ours - theirs).abs().mean()) < 0.08  # normalised units (~0.02 of the 0-255 range)


def test_grid_sample_and_roi_align_cut_the_same_pixels_and_flips_mirror() -> None:
    pixels = torch.randint(0, 256, (6, 3, 20, 24), dtype=torch.uint8)
    boxes = torch.tensor([[0, 0, 24, 20], [3, 2, 17, 19], [5.0, 1, 20, 12]] * 2)
    enlarged = ba.crop_resize(pixels, boxes, 32)  # every box <= 32: the grid_sample path
    from torchvision.ops import roi_align
    index = torch.arange(6, dtype=boxes.dtype).unsqueeze(1)
    reference = roi_align(pixels.float(), torch.cat([index, boxes], dim=1), output_size=32, sampling_ratio=0,
                          aligned=True)
    torch.testing.assert_close(enlarged, reference, atol=1e-3, rtol=0)
    flips = torch.tensor([True, False, True, False, False, True])
    mirrored = ba.crop_resize(pixels, boxes, 32, flips)
    torch.testing.assert_close(mirrored[flips], enlarged[flips].flip(-1), atol=1e-3, rtol=0)
    assert torch.equal(mirrored[~flips], enlarged[~flips])
    shrunk = ba.crop_resize(pixels, boxes, 8, flips)  # boxes over 8 px: the roi_align path, same flips
    torch.testing.assert_close(shrunk[flips], ba.crop_resize(pixels, boxes, 8)[flips].flip(-1))


def test_an_image_draws_the_same_crop_and_flip_in_any_batch() -> None:
    keys = ba.sample_keys(seed=3, epoch=2, indices=[5, 9, 1, 12])
    alone = ba.uniforms(keys[1:2])
    together = ba.uniforms(keys)
    assert torch.equal(alone[0], together[1])
    assert (together >= 0).all() and (together < 1).all()
    many = ba.uniforms(ba.sample_keys(0, 0, range(4000)))
    assert float(many.mean()) == pytest.approx(0.5, abs=0.01)
    assert not torch.equal(ba.uniforms(ba.sample_keys(3, 3, [9])), alone)  # another epoch, other draws


# -- the store, its loader and its cache ---------------------------------------------------------------------------
def test_the_loader_gives_each_image_the_same_pixels_whatever_the_batch_size(tmp_path: Path) -> None:
    from fasttrain.datasets.bundle import DataBundle
    from fasttrain.datasets.loaders import DecodedLoader
    from fasttrain.datasets.sampler import EpochSampler
    write_tree(tmp_path / "d", {"a": 6, "b": 6}, size=20)
    train, _, _ = _open(tmp_path / "d", None)
    bundle = DataBundle(train=train, val=None, num_classes=2, class_names=["a", "b"], kind="images", source="d",
                        train_size=len(train))

    def per_image(batch: int, start: int = 0) -> list[torch.Tensor]:
        sampler = EpochSampler(len(train), seed=4, shuffle=True, drop_last=False)
        sampler.set_epoch(1)
        sampler.set_start(start)
        return [img for images, _ in DecodedLoader(train, bundle, sampler, batch, False) for img in images]

    whole, small = per_image(8), per_image(3)
    assert len(whole) == len(small) == 8
    assert all(torch.equal(a, b) for a, b in zip(whole, small, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(whole[3:], per_image(3, start=3), strict=True))  # a resumed pass


def test_pixels_are_cached_reused_and_invalidated(tmp_path: Path) -> None:
    from fasttrain.datasets.pixel_cache import cache_key
    write_tree(tmp_path / "d", {"a": 6, "b": 6}, size=20)
    cache = tmp_path / "cache"
    train, val, note = _open(tmp_path / "d", cache)
    assert "the first time a batch draws it" in note and not train.saved
    train.ensure(list(range(len(train) - 3)))  # a pass that drew all but 3 (drop_last)
    train.pass_done()
    assert train.saved and len(list((cache / "decoded").glob("*.npz"))) == 1
    again, _, note = _open(tmp_path / "d", cache)
    val.pass_done()
    assert again.saved and torch.equal(again.pixels, train.pixels)
    assert "from the cache of an earlier run" in _open(tmp_path / "d", cache)[2]
    before = cache_key(_samples(tmp_path / "d"))
    first = sorted((tmp_path / "d").rglob("*.png"))[0]
    os.utime(first, ns=(1, 1))  # the same file touched: another key, decoded afresh
    assert cache_key(_samples(tmp_path / "d")) != before and not _open(tmp_path / "d", cache)[0].saved
    for saved in (cache / "decoded").glob("*.npz"):
        saved.write_bytes(b"not a zip")  # a damaged cache is ignored, never trusted
        assert load_pixels(saved, len(train)) is None


def test_a_corrupt_file_is_skipped_and_counted_or_stops_a_strict_run(tmp_path: Path) -> None:
    from fasttrain.core.errors import UserError
    from fasttrain.datasets.bundle import DataBundle
    from fasttrain.datasets.loaders import DecodedLoader
    from fasttrain.datasets.sampler import EpochSampler
    write_tree(tmp_path / "d", {"a": 5, "b": 5}, size=20)
    bad = write_corrupt(tmp_path / "d" / "a" / "zz.png")
    train, _, _ = _open(tmp_path / "d", None)
    for strict in (False, True):
        bundle = DataBundle(train=train, val=None, num_classes=2, class_names=["a", "b"], kind="images",
                            source="d", train_size=len(train), strict=strict)
        loader = DecodedLoader(train, bundle, EpochSampler(len(train), shuffle=False), 4, False)
        if strict:
            with pytest.raises(UserError, match=r"cannot read image .*zz\.png"):
                list(loader)
            continue
        assert sum(len(t) for _, t in loader) == len(train) - 1
        assert bundle.bad_files() == [str(bad)]


def test_decoding_threads_are_used_only_for_images_that_repay_them(tmp_path: Path) -> None:
    from fasttrain.datasets.decoded_images import SAMPLE_IMAGES, pool_pays
    # recorded single-thread decode times per image on the 2-core machine (decoded_images.py's comment)
    assert not pool_pays([72e-6] * 8, threads=2)               # digits PNGs at 32 px: a pool was 2.3x slower
    assert not pool_pays([123e-6] * 8, threads=2)              # JPEG photos at 128 px
    assert pool_pays([790e-6] * 8, threads=2)                  # JPEG photos at 448 px: 1.3-1.6x faster
    assert not pool_pays([790e-6] * 8, threads=1)
    assert not pool_pays([790e-6] * 3, threads=2)              # too few timed yet
    assert not pool_pays([1.0] + [60e-6] * 8, threads=2)       # the first file pays for imports: the median
    write_tree(tmp_path / "d", {"a": 12, "b": 12}, size=20)
    train, _, _ = _open(tmp_path / "d", None)
    train.ensure([0, 1, 2])
    assert int(train.ready.sum()) == 3
    train.ensure(list(range(len(train))))
    assert bool(train.ready.all())
    assert len(train.decode_times) == SAMPLE_IMAGES and not pool_pays(train.decode_times, 2)  # 20 px PNGs: one by one


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "small"
    where.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
                                           capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_cache_on_a_full_disk_costs_only_the_next_runs_decoding(full_disk: Path) -> None:
    pixels = torch.zeros(40, 3, 100, 100, dtype=torch.uint8)  # 1.2 MB: over the 1 MiB file system
    target = full_disk / "decoded" / "k.npz"
    assert save_pixels(target, pixels, torch.full((40, 2), 100, dtype=torch.int32), {}) is False
    assert list((full_disk / "decoded").iterdir()) == []  # no half-written file left behind


# -- the choice -----------------------------------------------------------------------------------------------------
def test_what_cannot_be_decoded_once_says_why() -> None:
    assert unbatched_augment(CROP) == []
    assert unbatched_augment(AugmentSpec(color_jitter=0.3, random_erasing=0.25)) == \
        ["augment.color_jitter", "augment.random_erasing"]
    assert fit_reason(5400, 32, 32, 64, 64 * MIB) is None  # the shapes set: 16 MiB
    assert "over the" in fit_reason(1_281_167, 400, 500, 224, 4 * 2**30)  # ImageNet-sized: hundreds of GiB
    assert "4x the 32 px crop" in fit_reason(100, 256, 256, 32, 64 * MIB)


def test_train_plans_decoded_images_with_every_core_and_says_so(cli, tmp_path: Path) -> None:
    write_tree(tmp_path / "d" / "train", {"a": 8, "b": 8}, size=20)
    write_tree(tmp_path / "d" / "val", {"a": 2, "b": 2}, size=20, seed=1)
    base = ("train", "--data", str(tmp_path / "d"), "--profile", "cpu", "--image-size", "16", "--set",
            "loader.batch_size=4", "--dry-run", "--json")
    plan = json.loads(cli(*base).out)["plan"]
    assert plan["workers"] == 0 and plan["in_memory"]
    assert any(n.startswith("input: the 20 images are decoded once into RAM") for n in plan["notes"])
    off = json.loads(cli(*base, "--set", "loader.decode_once=false").out)["plan"]
    assert off["workers"] == 1 and not off["in_memory"]
    jitter = json.loads(cli(*base, "--set", "augment.color_jitter=0.2").out)["plan"]
    assert "input: images decoded per epoch by loader workers: augment.color_jitter needs the per-image " \
           "pipeline" in jitter["notes"]


def test_an_in_memory_run_waiting_for_data_is_not_told_to_add_workers() -> None:
    from fasttrain.hardware.report import HardwareReport
    from fasttrain.plan import make_plan
    from fasttrain.profiles.presets import resolve
    from fasttrain.telemetry.verdict import assess
    machine = HardwareReport.model_validate(json.loads(
        (Path(__file__).parent / "fixtures" / "reports" / "cpu_only.json").read_text()))
    plan = make_plan(resolve("cpu").profile, machine, in_memory="the images are decoded once into RAM")
    assert plan.in_memory and plan.workers == 0
    verdict = assess({"steps_seen": 50, "window_steps": 30, "data_wait_fraction": 0.45, "h2d_fraction": 0.0,
                      "compute_fraction": 0.55}, plan, machine)
    assert verdict.kind == "input-bound" and verdict.suggested_workers == 0
    assert "loader.decode_once=false" in verdict.text and "num_workers" not in verdict.text


def test_doctor_says_what_train_does_with_the_folder(cli, tmp_path: Path) -> None:
    write_tree(tmp_path / "d" / "train", {"a": 8, "b": 8}, size=20)
    write_tree(tmp_path / "d" / "val", {"a": 2, "b": 2}, size=20, seed=1)
    found = {f["id"]: f for f in json.loads(cli("doctor", "--data", str(tmp_path / "d"), "--profile", "cpu",
                                                "--json").out)["findings"]}
    assert found["input-path"]["title"] == "--data is an image folder that fits in RAM decoded"
    assert "decodes the 20 images once into RAM" in found["input-path"]["detail"]
    found = {f["id"]: f for f in json.loads(cli("doctor", "--data", str(tmp_path / "d"), "--profile", "gcp-v100",
                                                "--json").out)["findings"]}
    assert "every epoch decodes" in found["input-path"]["title"]
    assert ("augment.rotation_degrees, augment.translate, augment.color_jitter and augment.random_erasing need the "
            "per-image pipeline") in found["input-path"]["detail"]


def test_estimate_forecasts_the_path_train_takes(cli, tmp_path: Path) -> None:
    write_tree(tmp_path / "d" / "train", {"a": 8, "b": 8}, size=20)
    write_tree(tmp_path / "d" / "val", {"a": 2, "b": 2}, size=20, seed=1)
    args = ("estimate", "--data", str(tmp_path / "d"), "--profile", "cpu", "-m", "tiny_cnn", "--image-size", "16",
            "--set", "loader.batch_size=4", "--json")
    res = cli(*args)
    assert res.code == 0, res.err
    out = json.loads(res.out)
    assert out["forecast"]["loader"]["workers"] == 0 and "decoded once into RAM" in out["forecast"]["loader"]["source"]
    assert "input: train decodes the 20 images once into RAM" in " ".join(out["plan_notes"])
    per_image = json.loads(cli(*args, "--set", "loader.decode_once=false").out)
    assert per_image["forecast"]["loader"]["workers"] == 1
    assert "decoded once" not in per_image["forecast"]["loader"]["source"]
