"""Why validation re-estimates batch-norm statistics (train/loop/norm_stats.py): a loop of the `cpu` preset's recipe
written out by hand, scored after each epoch three ways.

  trained on    accuracy on the training batches as they were trained (training mode, the batch's own statistics)
  running       validation with the running statistics (momentum --momentum, torch's default 0.1), as a plain
                loop validates
  N images      validation after the statistics were re-estimated with the current weights on N training images
                by fasttrain's own train/loop/norm_stats.py (momentum None: a plain average), then put back

The recipe: timm's resnet18 from scratch, AdamW 3e-3 (weight decay 0.05, not on norms and biases), label smoothing
0.1, 0.3 epoch of warm-up then cosine, bf16 autocast + channels_last, random-resized crops of 80-100% of the area, no
flips, batch 64, no EMA; the data: time_to_accuracy.py's folders (default mnist: 4,000 of MNIST's digits).
Printed: one table row per epoch. docs/benchmarks.md, "Batch-norm statistics", has a run.

  .venv/bin/python benchmarks/bn_statistics.py [--data mnist] [--seed 1] [--epochs 8] [--momentum 0.1]
"""
from __future__ import annotations

import argparse
import copy
import math
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from time_to_accuracy import REAL_DATA, data_folder  # the same folders

from fasttrain.train.loop.norm_stats import RecentBatches, recalibrate, training_norms

SIZES = (128, 256, 512, 1024)  # images the statistics are re-estimated on


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="mnist", choices=REAL_DATA)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--momentum", type=float, default=0.1)
    args = ap.parse_args()
    import timm
    import torch
    import torch.nn.functional as F
    from torchvision import datasets
    from torchvision import transforms as T

    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    norm = T.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    with tempfile.TemporaryDirectory(prefix="bn-") as tmp:
        root = data_folder(args.data, Path(tmp))
        train = datasets.ImageFolder(str(root / "train"), T.Compose(
            [T.RandomResizedCrop(32, scale=(0.8, 1.0)), T.ToTensor(), norm]))
        val = datasets.ImageFolder(str(root / "val"), T.Compose([T.Resize(37), T.CenterCrop(32), T.ToTensor(), norm]))
        loader = torch.utils.data.DataLoader(train, 64, shuffle=True, drop_last=True, num_workers=1,
                                             persistent_workers=True)
        val_x = torch.stack([val[i][0] for i in range(len(val))]).to(memory_format=torch.channels_last)
        val_y = torch.tensor(val.targets)
        model = timm.create_model("resnet18", num_classes=len(train.classes)).to(memory_format=torch.channels_last)
        norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
        for m in norms:
            m.momentum = args.momentum
        decay = [p for p in model.parameters() if p.ndim > 1]
        rest = [p for p in model.parameters() if p.ndim <= 1]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": rest, "weight_decay": 0.0}],
                                lr=3e-3)
        steps, warm = args.epochs * len(loader), max(1, int(0.3 * len(loader)))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / warm if s < warm else
                                                  0.5 * (1 + math.cos(math.pi * (s - warm) / (steps - warm))))

        def score() -> float:
            model.eval()
            with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
                return float((model(val_x).argmax(1) == val_y).float().mean())

        def re_estimated(images: int) -> float:
            """fasttrain's own re-estimate (train/loop/norm_stats.py) on the next `images` training images."""
            saved = copy.deepcopy(model.state_dict())
            recent = RecentBatches(images)
            for i, batch in enumerate(loader):
                if i * 64 >= images:
                    break
                recent.add(batch)
            model.train()
            recalibrate(model, training_norms(model), recent,
                        lambda x, y: (x.to(memory_format=torch.channels_last), y),
                        lambda: torch.autocast("cpu", torch.bfloat16))
            acc = score()
            model.load_state_dict(saved)
            return acc

        print(f"{args.data}, seed {args.seed}, running-statistics momentum {args.momentum}")
        print("| epoch | trained on | running | " + " | ".join(f"{n} images" for n in SIZES) + " |")
        print("| ---: | ---: | ---: | " + " | ".join("---:" for _ in SIZES) + " |")
        for epoch in range(1, args.epochs + 1):
            model.train()
            hits = seen = 0
            for x, y in loader:
                with torch.autocast("cpu", torch.bfloat16):
                    out = model(x.to(memory_format=torch.channels_last))
                    loss = F.cross_entropy(out, y, label_smoothing=0.1)
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                hits, seen = hits + int((out.argmax(1) == y).sum()), seen + len(y)
            running = score()
            again = " | ".join(f"{re_estimated(n):.3f}" for n in SIZES)
            print(f"| {epoch} | {hits / seen:.3f} | {running:.3f} | {again} |", flush=True)


if __name__ == "__main__":
    main()
