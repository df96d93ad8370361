"""One-pixel convolutions as matrix products (models/one_pixel.py): training steps with and without, interleaved.

Each model is built twice from the same seed, one converted by `to_one_pixel`, both in channels_last on the CPU
with fasttrain's optimizer (AdamW, fused, the copy-free step of train/loop/cpu_fused.py) and the precision asked
for; then rounds of --steps steps alternate between them (the order flips each round). Printed per model: the
median step time of each and the ratio (without / with), and the largest difference of their outputs in eval
mode (the same weights: the same sums in another order). A model none of whose convolutions has a one-pixel
output at --image-size shows a ratio near 1 (the check per call costs a few microseconds).

  .venv/bin/python benchmarks/one_pixel.py [--models resnet18 resnet50 mobilenetv3_small_100] [--image-size 32]
      [--batch 64] [--precision bf16|fp32] [--rounds 8] [--steps 5]
"""
from __future__ import annotations

import argparse
import statistics
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["resnet18", "resnet50", "mobilenetv3_small_100"])
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=5)
    args = ap.parse_args()

    import torch
    import torch.nn.functional as F

    from fasttrain.models.one_pixel import to_one_pixel
    from fasttrain.models.registry import create_model
    from fasttrain.profiles.schema import OptimSpec
    from fasttrain.train.loop.optim import build_optimizer

    torch.set_num_threads(max(1, torch.get_num_threads()))
    x = torch.randn(args.batch, 3, args.image_size, args.image_size).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (args.batch,))
    spec = OptimSpec(optimizer="adamw", base_lr=3e-3, weight_decay=0.05)
    print(f"resnet-style models at {args.image_size} px, batch {args.batch}, {args.precision}, channels_last, "
          f"fused AdamW; {args.rounds} rounds of {args.steps} steps")
    print("| model | convolutions turned | step without | step with | ratio | max output difference |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name in args.models:
        models, turned = {}, 0
        for way in ("without", "with"):
            torch.manual_seed(0)
            model = create_model(name, num_classes=10)
            if way == "with":
                turned = to_one_pixel(model)
            models[way] = model.to(memory_format=torch.channels_last)
        with torch.no_grad():
            diff = (models["with"].eval()(x) - models["without"].eval()(x)).abs().max().item()
        optimizers = {way: build_optimizer(m, spec, 3e-3, fused=True) for way, m in models.items()}

        def step(way: str, models: dict = models, optimizers: dict = optimizers) -> None:  # bound: made per case
            model, opt = models[way].train(), optimizers[way]
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        for way in models:  # warm-up: oneDNN's kernels chosen, the optimizer's state allocated
            for _ in range(3):
                step(way)
        times: dict[str, list[float]] = {way: [] for way in models}
        for r in range(args.rounds):
            for way in (("without", "with") if r % 2 == 0 else ("with", "without")):
                started = time.perf_counter()
                for _ in range(args.steps):
                    step(way)
                times[way].append((time.perf_counter() - started) / args.steps)
        without, with_ = statistics.median(times["without"]), statistics.median(times["with"])
        print(f"| {name} | {turned} | {without * 1e3:.1f} ms | {with_ * 1e3:.1f} ms | {without / with_:.2f}x | "
              f"{diff:.1e} |", flush=True)


if __name__ == "__main__":
    main()
