"""Input paths compared per core: torchvision's ImageFolder + PIL (baseline), the fast decode path, prepared shards.

Generated JPEGs of ImageNet's typical sizes (400-500 px) and of 12-megapixel phone size (4000x3000), decoded and
augmented to 224 px and to 64 px with the default training transform. Each path runs in this one process with one
torch thread, the way a DataLoader worker does, so images per CPU-second is images/s per core. Rounds interleave
the paths (rotating order) and the table shows medians of per-round ratios to the baseline, so a busy machine
slows both sides alike. Exit 1 when, at 224 px on the ImageNet-size files, shards reach less than 3x or the fast
path less than 1.5x the baseline per core. `--photos DIR` runs the same on a folder of real photographs instead.

    .venv/bin/python benchmarks/input_paths.py                 # ~2 minutes on 2 cores
    .venv/bin/python benchmarks/input_paths.py --photos DIR    # your own ImageFolder tree
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

TARGETS = {"shards": 3.0, "fast-decode": 1.5}


def make_jpegs(root: Path, sizes: list[tuple[int, int]], per_class: int) -> Path:
    """Smooth gradients with noise and shapes: JPEG-compressible like photographs, not like white noise."""
    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(0)
    for c in range(2):
        for i in range(per_class):
            w, h = sizes[i % len(sizes)]
            y, x = np.mgrid[0:h, 0:w].astype(np.float32)
            base = np.stack([(x / w) * 200 + c * 40, (y / h) * 180, ((x + y) / (w + h)) * 160], -1)
            base += rng.normal(0, 12, base.shape)
            img = Image.fromarray(np.clip(base, 0, 255).astype(np.uint8))
            draw = ImageDraw.Draw(img)
            for _ in range(6):
                x0, y0 = int(rng.integers(0, w - 10)), int(rng.integers(0, h - 10))
                draw.ellipse([x0, y0, x0 + w // 5, y0 + h // 5], fill=tuple(int(v) for v in rng.integers(0, 255, 3)))
            path = root / f"class{c}" / f"{i:04d}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            img.save(path, quality=90)
    return root


def datasets(src: Path, work: Path, size: int) -> dict[str, object]:
    from fasttrain.bench.path_timing import TorchvisionFolder
    from fasttrain.datasets.fast_decode import FastImageFiles
    from fasttrain.datasets.image_folder import scan_tree
    from fasttrain.datasets.prepare import run_plan
    from fasttrain.datasets.prepare_plan import plan_from_splits
    from fasttrain.datasets.shards import ShardImages, load_manifest
    from fasttrain.datasets.transforms import train_transform
    from fasttrain.profiles.schema import AugmentSpec

    classes, files = scan_tree(src)
    samples = [(p, i) for i, c in enumerate(classes) for p in files[c]]
    dst = work / f"shards-{src.name}-{size}"
    run_plan(plan_from_splits(src, classes, samples, [], image_size=size, scale=1.15, shard_size=64), dst)
    transform = train_transform(AugmentSpec(), size)
    shards = ShardImages(dst, load_manifest(dst)["splits"]["train"]["shards"], transform)
    return {"torchvision": TorchvisionFolder(samples, transform), "fast-decode": FastImageFiles(samples, transform),
            "shards": shards}


def per_core(dataset: object, seconds: float) -> float:
    """Images per CPU-second over about `seconds` of decoding + augmenting + collating batches of 8, and the
    normalisation the fast paths leave to the training device (done here on the CPU, so it is counted)."""
    from fasttrain.datasets.fast_decode import normalise_batch
    from fasttrain.datasets.loaders import collate_images

    n = len(dataset)  # type: ignore[arg-type]
    done, cpu0, wall0 = 0, time.process_time(), time.perf_counter()
    while time.perf_counter() - wall0 < seconds or done < 8:
        batch = [dataset[(done + k, (done + k) % n)] for k in range(8)]  # type: ignore[index]
        normalise_batch(collate_images(batch)[0])
        done += 8
    return done / max(time.process_time() - cpu0, 1e-9)


def run(sets: dict[str, Path], sizes: list[int], rounds: int, seconds: float, work: Path) -> list[dict]:
    rows = []
    for set_name, src in sets.items():
        for size in sizes:
            ds = datasets(src, work, size)
            for d in ds.values():
                per_core(d, 0.2)  # warm-up: imports, first allocations
            rates: dict[str, list[float]] = {k: [] for k in ds}
            ratios: dict[str, list[float]] = {k: [] for k in ds}
            names = list(ds)
            for r in range(rounds):
                got = {}
                for name in names[r % len(names):] + names[:r % len(names)]:
                    got[name] = per_core(ds[name], seconds)
                for name in names:
                    rates[name].append(got[name])
                    ratios[name].append(got[name] / got["torchvision"])
            for name in names:
                rows.append({"set": set_name, "size": size, "path": name,
                             "per_core": statistics.median(rates[name]), "ratio": statistics.median(ratios[name])})
                print(f"{set_name:>16} {size:>4} px  {name:<12} {rows[-1]['per_core']:8.1f} img/s per core  "
                      f"{rows[-1]['ratio']:5.2f}x", flush=True)
    return rows


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--photos", type=Path, help="an ImageFolder tree of real photographs to use instead")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=1.5, help="per path per round")
    ap.add_argument("--images", type=int, default=48, help="generated images per set")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="fasttrain-paths-") as tmp:
        work = Path(tmp)
        if args.photos:
            sets = {"photos": args.photos}
        else:
            sets = {"imagenet-size": make_jpegs(work / "imagenet", [(500, 375), (450, 400), (400, 500)],
                                               args.images // 2),
                    "12MP": make_jpegs(work / "phone", [(4000, 3000)], max(2, args.images // 8))}
        rows = run(sets, [224, 64], args.rounds, args.seconds, work)
    first = next(iter(sets))
    short = [f"{r['path']} {r['ratio']:.2f}x < {TARGETS[r['path']]}x" for r in rows
             if r["set"] == first and r["size"] == 224 and r["path"] in TARGETS and r["ratio"] < TARGETS[r["path"]]]
    print("below target: " + "; ".join(short) if short else "targets met at 224 px")
    return 1 if short else 0


if __name__ == "__main__":
    sys.exit(main())
