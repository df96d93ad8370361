"""`fasttrain data prepare` and the fast decode path: shards round-trip labels and class order, corrupt files are
counted, a rerun resumes, another data set is refused, and the fast path agrees with the PIL path."""
from __future__ import annotations

import json
import tarfile
from pathlib import Path

import numpy as np
import pytest
from image_tree import write_corrupt, write_tree
from PIL import Image


def write_jpegs(root: Path, counts: dict[str, int], size: tuple[int, int] = (48, 40)) -> Path:
    rng = np.random.default_rng(1)
    for c, (name, n) in enumerate(counts.items()):
        for i in range(n):
            path = root / name / f"{i:03d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            base = np.zeros((size[1], size[0], 3), np.uint8)
            base[..., c % 3] = 200
            noise = rng.integers(0, 55, size=base.shape, dtype=np.uint8)
            Image.fromarray(base + noise).save(path, quality=90)
    return root


def test_shards_round_trip_labels_class_order_and_split(cli, tmp_path: Path) -> None:
    from fasttrain.datasets.build import build_datasets
    from fasttrain.profiles.schema import AugmentSpec

    src = write_tree(tmp_path / "src", {"zebra": 7, "ant": 5, "moth": 6}, size=24)
    write_corrupt(src / "ant" / "broken.png")
    r = cli("data", "prepare", str(src), "--out", str(tmp_path / "dst"), "--image-size", "16", "--shard-size", "4",
            "--workers", "2", "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["bad_files"] == [{"path": str(src / "ant" / "broken.png"), "reason": out["bad_files"][0]["reason"]}]
    source = build_datasets(str(src), image_size=16, augment=AugmentSpec(), seed=0)
    shards = build_datasets(str(tmp_path / "dst"), image_size=16, augment=AugmentSpec(), seed=0)
    assert shards.class_names == source.class_names == ["ant", "moth", "zebra"]
    good = [(p, t) for p, t in source.train.samples if not p.endswith("broken.png")]
    assert sorted(t for _, t in shards.train.samples) == sorted(t for _, t in good)
    assert [t for _, t in shards.val.samples] == [t for _, t in source.val.samples]
    assert out["train"] + out["val"] == 18 and out["train"] == shards.train_size
    # each shard is a plain WebDataset tar: <key>.png + <key>.cls, readable by tarfile
    with tarfile.open(tmp_path / "dst" / "train-000000.tar") as tf:
        names = tf.getnames()
    assert any(n.endswith(".cls") for n in names) and any(n.endswith(".png") for n in names)
    image, label = shards.train[(5, 0)]
    assert tuple(image.shape) == (3, 16, 16) and label == shards.train.samples[0][1]
    manifest = json.loads((tmp_path / "dst" / "manifest.json").read_text())
    assert sum(manifest["splits"]["train"]["per_class"]) == out["train"]


def test_rerun_resumes_and_a_different_set_is_refused(cli, tmp_path: Path) -> None:
    from fasttrain.datasets.prepare import prepare
    from fasttrain.datasets.prepare_plan import STATE_DIR, make_plan

    src = write_jpegs(tmp_path / "src", {"a": 6, "b": 6})
    dst = tmp_path / "dst"
    plan = make_plan(src, 16, 1.15, 3)
    # an interrupted run: two shards finished (tar + record), one half-written temp file
    first = prepare(src, dst, image_size=16, shard_size=3, workers=1)
    (dst / "manifest.json").unlink()
    kept = {j.name for j in plan.jobs[:2]}
    for job in plan.jobs[2:]:
        (dst / job.name).unlink()
    (dst / STATE_DIR).mkdir()
    (dst / STATE_DIR / "plan.json").write_text(json.dumps({"fingerprint": plan.fingerprint}))
    for job in plan.jobs[:2]:
        part = next(s for s in first.manifest["splits"][job.split]["shards"] if s["name"] == job.name)
        (dst / STATE_DIR / f"{job.name}.json").write_text(json.dumps({**part, "split": job.split, "bad": []}))
    (dst / "train-000002.tar.123.tmp").write_bytes(b"half")
    again = prepare(src, dst, image_size=16, shard_size=3, workers=1)
    assert again.skipped_shards == len(kept) and again.written_shards == len(plan.jobs) - 2
    for split in ("train", "val"):
        assert again.manifest["splits"][split]["per_class"] == first.manifest["splits"][split]["per_class"]
        assert [s["name"] for s in again.manifest["splits"][split]["shards"]] == \
            [s["name"] for s in first.manifest["splits"][split]["shards"]]
    assert not list(dst.glob("*.tmp")) and not (dst / STATE_DIR).exists()
    assert prepare(src, dst, image_size=16, shard_size=3, workers=1).already_done
    r = cli("data", "prepare", str(src), "--out", str(dst), "--image-size", "32")
    assert r.code == 2 and "different prepared data set" in r.err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    r = cli("data", "prepare", str(src), "--out", str(tmp_path / "other"))
    assert r.code == 2 and "not empty" in r.err


def test_bench_loader_estimate_and_doctor_take_a_prepared_set(cli, tmp_path: Path, monkeypatch) -> None:
    """bench loader compares the paths and saves the factors; estimate and doctor --data read the prepared set,
    and doctor quotes the factor bench loader measured on the source folder."""
    monkeypatch.chdir(tmp_path)
    src = write_jpegs(tmp_path / "src", {"a": 12, "b": 12})
    dst = tmp_path / "dst"
    assert cli("data", "prepare", str(src), "--out", str(dst), "--image-size", "16", "--workers", "1").code == 0
    r = cli("doctor", "--data", str(src), "--json")  # nothing measured yet: says so and how to measure it
    found = {f["id"]: f for f in json.loads(r.out)["findings"]}
    assert "unmeasured" in found["input-path"]["detail"] and "bench loader --data" in found["input-path"]["detail"]
    r = cli("bench", "loader", "--data", str(src), "--image-size", "16", "--batch-size", "4", "--max-workers", "0",
            "--rounds", "1", "--batches", "2", "--max-seconds", "0.3", "--model", "none", "--compare-images", "16",
            "--shards", str(dst), "--json", "--out", str(tmp_path / "runs" / "bench-loader-20261124-000000"))
    assert r.code == 0, r.err
    paths = {p["name"]: p for p in json.loads(r.out)["paths"]}
    assert {"torchvision", "fast-decode", "shards", "gpu-decode"} <= set(paths)
    assert paths["torchvision"]["per_core_vs_torchvision"] == 1.0
    assert all(paths[n]["images_per_s"] > 0 and paths[n]["images_per_s_per_core"] > 0
               for n in ("torchvision", "fast-decode", "shards"))
    assert paths["gpu-decode"]["status"] == "not applicable" and "CUDA" in paths["gpu-decode"]["reason"]
    r = cli("doctor", "--data", str(src), "--json")
    found = {f["id"]: f for f in json.loads(r.out)["findings"]}
    assert f"prepared shards fed {paths['shards']['per_core_vs_torchvision']:.1f}x" in found["input-path"]["detail"]
    r = cli("doctor", "--data", str(dst), "--json")
    found = {f["id"]: f for f in json.loads(r.out)["findings"]}
    assert "prepared shard set" in found["input-path"]["title"]
    assert "24 images in" in found["input-path"]["detail"] and "images/s from shards" in found["data-disk"]["detail"]
    r = cli("estimate", "--data", str(dst), "-m", "tiny_cnn", "--set", "loader.batch_size=8", "--json")
    assert r.code == 0, r.err
    assert "prepared shards" in r.out and "22 training images" in r.out
    # train takes it as `data prepare` says (its flip and crop checks sample class folders, which shards have not)
    r = cli("train", "--data", str(dst), "-m", "tiny_cnn", "--image-size", "16", "--epochs", "1", "--set",
            "loader.batch_size=8", "--run-name", "shards", "--json", "--no-tune")
    assert r.code == 0, r.err
    assert json.loads(r.out)["epochs_run"] == 1
    r = cli("data", "prepare", str(src), "--out", str(src / "inner"))
    assert r.code == 2 and "inside SRC" in r.err


def test_a_missing_or_empty_source_is_named_src(cli, tmp_path: Path) -> None:
    """The folder checks are shared with `train --data`, but here the folder is the SRC argument."""
    for src in (tmp_path / "nowhere", tmp_path):
        r = cli("data", "prepare", str(src), "--out", str(tmp_path.parent / f"{tmp_path.name}-dst"))
        assert r.code == 2, r.err
        assert r.err.startswith("fasttrain: error: SRC: ") and "--data" not in r.err, r.err
        assert "Traceback" not in r.err + r.out


def test_input_bound_verdict_names_the_measured_factor() -> None:
    from fasttrain.datasets.measured import gain_sentence
    from fasttrain.telemetry.verdict import _cheaper

    measured = gain_sentence({"shards": 2.94, "date": "2026-11-24"}, "/d")
    assert measured.startswith("prepared shards fed 2.9x") and "(bench loader, 2026-11-24)" in measured
    assert measured in _cheaper(measured) and "fasttrain data prepare DIR --out DST" in _cheaper(measured)
    assert "unmeasured: `fasttrain bench loader --data /d`" in gain_sentence(None, "/d")
    assert "already reads prepared shards" in _cheaper("")


def test_fast_path_agrees_with_the_pil_path(tmp_path: Path) -> None:
    """Same files, same seeds: the same crops and flips, so per-sample means correlate and the pooled statistics
    match; at full size (no reduced decoding) the pixels themselves agree closely."""
    import torch

    from fasttrain.datasets.build import ImageFiles
    from fasttrain.datasets.fast_decode import FastImageFiles, normalise_batch
    from fasttrain.datasets.transforms import train_transform, val_transform
    from fasttrain.profiles.schema import AugmentSpec

    src = write_jpegs(tmp_path / "src", {"a": 8, "b": 8}, size=(96, 80))
    samples = [(str(p), i % 2) for i, p in enumerate(sorted(src.rglob("*.jpg")))]
    aug = AugmentSpec(color_jitter=0.2)
    for transform in (train_transform(aug, 24), val_transform(24)):
        pil, fast = ImageFiles(samples, transform), FastImageFiles(samples, transform)
        a = torch.stack([pil[(s, i)][0] for i in range(len(samples)) for s in (1, 2)])
        b = torch.stack([fast[(s, i)][0] for i in range(len(samples)) for s in (1, 2)])
        assert b.dtype == torch.uint8  # normalisation is left to the training device
        b = normalise_batch(b)
        assert a.shape == b.shape
        assert torch.allclose(a.mean(dim=(0, 2, 3)), b.mean(dim=(0, 2, 3)), atol=0.05)
        assert torch.allclose(a.std(dim=(0, 2, 3)), b.std(dim=(0, 2, 3)), rtol=0.1)
        per_a, per_b = a.mean(dim=(1, 2, 3)), b.mean(dim=(1, 2, 3))
        assert torch.corrcoef(torch.stack([per_a, per_b]))[0, 1] > 0.95
    full = train_transform(AugmentSpec(random_resized_crop_scale=(0.9, 1.0)), 64)
    x, y = ImageFiles(samples, full)[(3, 0)][0], normalise_batch(FastImageFiles(samples, full)[(3, 0)][0])
    assert (x - y).abs().mean() < 0.05


def test_training_step_normalises_uint8_batches_like_the_transform() -> None:
    """The fast paths hand over uint8; StepEngine.to_device must give the numbers ToDtype + Normalize give."""
    from types import SimpleNamespace

    import torch
    from torchvision.transforms import v2

    from fasttrain.datasets.transforms import MEAN, STD
    from fasttrain.train.loop.step import StepEngine
    from fasttrain.train.loop.transfer import DeviceCopy

    images = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
    engine = SimpleNamespace(copy=DeviceCopy(torch.device("cpu"), channels_last=True, non_blocking=False))
    got, targets = StepEngine.to_device(engine, images, torch.tensor([0, 1]))
    want = v2.Normalize(MEAN, STD)(v2.ToDtype(torch.float32, scale=True)(images))
    assert got.dtype == torch.float32 and torch.allclose(got, want, atol=1e-5)
    floats = torch.randn(2, 3, 8, 8)  # batches normalised in the workers pass unchanged
    assert torch.equal(StepEngine.to_device(engine, floats, targets)[0], floats)


def test_corrupt_jpeg_is_a_bad_sample_on_the_fast_path(tmp_path: Path) -> None:
    from fasttrain.datasets.bundle import BadSample
    from fasttrain.datasets.fast_decode import FastImageFiles
    from fasttrain.datasets.transforms import val_transform

    bad = tmp_path / "x.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    got = FastImageFiles([(str(bad), 0)], val_transform(16))[0]
    assert isinstance(got, BadSample) and got.path == str(bad)


@pytest.mark.gpu
def test_gpu_decode_matches_the_cpu_decode(tmp_path: Path) -> None:
    import torch

    from fasttrain.datasets.fast_decode import FastImageFiles, normalise_batch
    from fasttrain.datasets.gpu_decode import GpuDecoder, collate_bytes
    from fasttrain.datasets.transforms import val_transform

    src = write_jpegs(tmp_path / "src", {"a": 4}, size=(64, 48))
    samples = [(str(p), 0) for p in sorted(src.rglob("*.jpg"))]
    raw = FastImageFiles(samples, None)
    data, _targets, bad = collate_bytes([raw[i] for i in range(len(raw))])
    gpu, kept = GpuDecoder(val_transform(32), torch.device("cuda"))(data)
    assert kept == list(range(len(samples)))
    cpu = normalise_batch(torch.stack([FastImageFiles(samples, val_transform(32))[i][0]
                                       for i in range(len(samples))]))
    assert gpu.shape == cpu.shape and gpu.is_cuda and not bad
    assert (gpu.cpu() - cpu).abs().mean() < 0.05


def test_a_real_sigterm_mid_run_then_a_rerun_gives_the_uninterrupted_manifest(cli, tmp_path: Path) -> None:
    """A real `fasttrain data prepare` child gets SIGTERM once its first shard is on disk: it stops (exit 130,
    no manifest, finished shards kept); the same command again completes, and the manifest (checksum included)
    equals that of a run never interrupted. (The reruns run in-process: only the interrupted one needs a child.)"""
    import os
    import signal
    import subprocess
    import sys
    import time

    from conftest import child_env

    src = write_jpegs(tmp_path / "src", {"a": 100, "b": 100}, size=(64, 48))
    args = ["data", "prepare", str(src), "--image-size", "16", "--shard-size", "2", "--workers", "1", "--json",
            "--out"]
    dst = tmp_path / "dst"
    child = subprocess.Popen([sys.executable, "-m", "fasttrain", *args, str(dst)], env=child_env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not list(dst.glob("*-000000.tar")) and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.002)
    os.kill(child.pid, signal.SIGTERM)
    _out, err = child.communicate(timeout=60)
    assert child.returncode == 130, err
    assert "interrupted" in err and not (dst / "manifest.json").exists()
    kept = len(list(dst.glob("*.tar")))
    assert 1 <= kept < 100, sorted(p.name for p in dst.iterdir())  # stopped part-way, finished shards kept
    again = cli(*args, str(dst))
    assert again.code == 0, again.err
    assert json.loads(again.out)["shards_resumed"] >= kept
    assert cli(*args, str(tmp_path / "whole")).code == 0
    a, b = (json.loads((d / "manifest.json").read_text()) for d in (dst, tmp_path / "whole"))
    assert a["checksum"] == b["checksum"] and a["splits"] == b["splits"] and a["classes"] == b["classes"]


def test_jpeg_header_size_matches_pil(tmp_path: Path) -> None:
    """The crop is drawn from header_size: it must read baseline, progressive and EXIF-carrying JPEGs as PIL does."""
    import io

    from fasttrain.datasets.fast_decode import header_size

    img = Image.fromarray(np.random.default_rng(0).integers(0, 255, (37, 53, 3), dtype=np.uint8))
    exif = Image.Exif()
    exif[0x010F] = "maker " * 40
    for kw in ({}, {"progressive": True}, {"exif": exif.tobytes(), "quality": 70}):
        buf = io.BytesIO()
        img.save(buf, "JPEG", **kw)
        assert header_size(buf.getvalue()) == (37, 53)
    buf = io.BytesIO()
    img.save(buf, "PNG")
    assert header_size(buf.getvalue()) == (37, 53)
