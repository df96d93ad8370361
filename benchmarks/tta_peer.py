"""One peer of benchmarks/time_to_accuracy.py: the loop people write instead of fasttrain, on an ImageFolder.

  plain      fp32, torch's default threads, SGD 0.05 (momentum 0.9, weight decay 5e-4), cosine per step,
             random crop with 4 px padding, DataLoader with 2 workers (what a tutorial writes)
  lightning  the same recipe through lightning.Trainer(precision="bf16-mixed") with channels_last
             (what an expert sets; Lightning is a benchmark-only dependency: pip install -e '.[bench]')

Each process writes one JSON line per epoch to --out: {"epoch", "val_acc1", "elapsed_s", "time"}: time is
time.time() when the epoch's validation ended, from which time_to_accuracy.py counts the seconds since it
launched the process (as for fasttrain's epoch rows), so imports and start-up count for everyone; elapsed_s is
counted from psutil's process start (informative: on a VM whose boot time is rounded it can be ~1 s early).
The model is timm's resnet18 (--model: another timm name), as `fasttrain train --model NAME` builds it.

  python benchmarks/tta_peer.py --way plain --data DIR --epochs 8 --image-size 32 --out FILE
"""
from __future__ import annotations

import argparse
import json
import os
import time

import psutil

STARTED = psutil.Process().create_time()
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def loaders(data: str, size: int, batch: int, workers: int):  # -> (train, val) DataLoaders
    import torch
    from torchvision import datasets, transforms

    train_tf = transforms.Compose([transforms.Resize((size, size)), transforms.RandomCrop(size, padding=4),
                                   transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    val_tf = transforms.Compose([transforms.Resize((size, size)), transforms.ToTensor(),
                                 transforms.Normalize(MEAN, STD)])
    train = datasets.ImageFolder(os.path.join(data, "train"), train_tf)
    val = datasets.ImageFolder(os.path.join(data, "val"), val_tf)
    common = {"num_workers": workers, "persistent_workers": workers > 0}
    return (torch.utils.data.DataLoader(train, batch_size=batch, shuffle=True, drop_last=True, **common),
            torch.utils.data.DataLoader(val, batch_size=256, **common), len(train.classes))


def record(out: str, epoch: int, acc: float) -> None:
    with open(out, "a", encoding="utf-8") as fh:
        now = time.time()
        fh.write(json.dumps({"epoch": epoch, "val_acc1": acc, "elapsed_s": now - STARTED, "time": now}) + "\n")


def plain(args: argparse.Namespace) -> None:
    import timm
    import torch
    import torch.nn.functional as F

    train, val, classes = loaders(args.data, args.image_size, args.batch, 2)
    model = timm.create_model(args.model, num_classes=classes)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs * len(train))
    for epoch in range(1, args.epochs + 1):
        model.train()
        for x, y in train:
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        model.eval()
        hits = seen = 0
        with torch.no_grad():
            for x, y in val:
                hits += int((model(x).argmax(1) == y).sum())
                seen += len(y)
        record(args.out, epoch, hits / seen)


def lightning(args: argparse.Namespace) -> None:
    import lightning as L
    import timm
    import torch
    import torch.nn.functional as F

    train, val, classes = loaders(args.data, args.image_size, args.batch, 2)

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = timm.create_model(args.model, num_classes=classes).to(memory_format=torch.channels_last)
            self.hits = self.seen = 0

        def training_step(self, batch, _):
            x, y = batch
            return F.cross_entropy(self.net(x.to(memory_format=torch.channels_last)), y)

        def validation_step(self, batch, _):
            x, y = batch
            self.hits += int((self.net(x.to(memory_format=torch.channels_last)).argmax(1) == y).sum())
            self.seen += len(y)

        def on_validation_epoch_end(self) -> None:
            if not self.trainer.sanity_checking:
                record(args.out, self.current_epoch + 1, self.hits / max(1, self.seen))
            self.hits = self.seen = 0

        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.epochs * len(train))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    trainer = L.Trainer(accelerator="cpu", devices=1, precision="bf16-mixed", max_epochs=args.epochs, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0)
    trainer.fit(Module(), train, val)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--way", choices=("plain", "lightning"), required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", default="resnet18", help="a timm model name (default resnet18)")
    args = ap.parse_args()
    (plain if args.way == "plain" else lightning)(args)


if __name__ == "__main__":
    main()
