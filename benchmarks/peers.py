"""fasttrain against the loops people write: a naive loop, an expert's loop, Lightning with defaults and with an
expert's settings, on the same work, interleaved round by round, medians of per-round ratios.

The work: resnet18, 64 px, batch 64, AdamW 3e-3 (the cpu profile's optimizer), on
  (a) random tensors in memory (`--data synthetic`), and
  (b) the built-in shapes images, decoded and augmented by real DataLoader workers (`--data shapes`).
fasttrain runs as users run it, in a subprocess: `fasttrain train --profile cpu --data D --model resnet18
--image-size 64 --epochs 1`, with an empty tuning cache and no decoded pixels cached each round, so its tuning
trial and (on (b)) its decoding of the images into RAM are paid every round, as on a first run;
its images/s = the epoch's training images / (the epoch's training seconds + the trial's seconds). Process
start, imports and validation are not counted, for any way. Each peer runs in its own process, times its
first step to its last (no untimed warm-up, as fasttrain's epoch has none) over --steps batches:
  naive       fp32, NCHW, torch's default threads, AdamW (foreach), DataLoader with `cores` workers for (b)
  expert      the naive loop + bf16 autocast + channels_last + fused AdamW
  L-default   lightning.Trainer(accelerator="cpu"), same model/optimizer/loader as naive
  L-expert    lightning.Trainer(precision="bf16-mixed") + channels_last (what an expert sets)
Lightning is a benchmark-only optional dependency (`pip install -e '.[bench]'`), never a runtime one.
Exit 1 when fasttrain is below --target-naive x the naive loop or --target-expert x L-expert on either work.

  .venv/bin/python benchmarks/peers.py [--rounds 3] [--steps 30] [--work a b]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEERS = ("naive", "expert", "L-default", "L-expert")
WAYS = ("fasttrain", *PEERS)
DATA = {"a": "synthetic", "b": "shapes"}
BATCH, SIZE, LR = 64, 64, 3e-3


NUM_CLASSES = [10]  # the shapes set's class count once _batches has opened it


def _model():
    from fasttrain.models.registry import create_model
    return create_model("resnet18", NUM_CLASSES[0], image_size=SIZE)


def tensor_batches(steps: int) -> list:
    """Work (a): `steps` batches of random tensors in memory, 4 distinct ones in turn (step_profile.py's too)."""
    import torch
    g = torch.Generator().manual_seed(0)
    made = [(torch.randn(BATCH, 3, SIZE, SIZE, generator=g), torch.randint(0, 10, (BATCH,), generator=g))
            for _ in range(4)]
    return [made[i % 4] for i in range(steps)]


def lightning_module(net, *, channels_last: bool, marks: list[float]):  # -> a LightningModule (lightning is optional)
    """The LightningModule both Lightning peers train (and step_profile.py profiles): cross-entropy, AdamW at LR, the
    input in channels_last when `channels_last`; time.perf_counter() appended to `marks` at its first step's start
    (on_train_start) and after its last (on_train_end)."""
    import lightning as L
    import torch

    class Module(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def training_step(self, batch, _):
            x, y = batch
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=LR)

        def on_train_start(self) -> None:
            marks.append(time.perf_counter())

        def on_train_end(self) -> None:
            marks.append(time.perf_counter())

    return Module()


def lightning_trainer(steps: int, *, bf16: bool):  # -> a lightning.Trainer
    """A Trainer for `steps` steps on the CPU with nothing around the steps (no logger, checkpoints, progress bar,
    summary): Lightning's defaults when not `bf16`, precision="bf16-mixed" (an expert's setting) when it is."""
    import lightning as L
    return L.Trainer(accelerator="cpu", devices=1, max_steps=steps, max_epochs=10_000, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                     precision="bf16-mixed" if bf16 else "32-true")


def _batches(work: str, steps: int, workers: int):  # -> an iterable of (images, targets)
    import torch
    if work == "a":
        return tensor_batches(steps)
    from fasttrain.datasets.build import build_datasets
    from fasttrain.profiles.presets import resolve
    bundle = build_datasets("shapes", image_size=SIZE, augment=resolve("cpu").profile.augment)
    NUM_CLASSES[0] = bundle.num_classes
    return torch.utils.data.DataLoader(bundle.train, batch_size=BATCH, shuffle=True, drop_last=True,
                                       num_workers=workers, persistent_workers=workers > 0)


def _plain(work: str, steps: int, expert: bool) -> float:
    import torch
    cores = len(os.sched_getaffinity(0))
    data = _batches(work, steps, cores)
    model = _model()
    if expert:
        model = model.to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, **({"fused": True} if expert else {}))
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    done, t0 = 0, time.perf_counter()
    while done < steps:
        for x, y in data:
            if expert:
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=expert):
                loss = loss_fn(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            done += 1
            if done == steps:
                break
    return steps * BATCH / (time.perf_counter() - t0)


def _lightning(work: str, steps: int, expert: bool) -> float:
    import torch

    cores = len(os.sched_getaffinity(0))
    data = _batches(work, steps, cores)
    if work == "a":
        data = torch.utils.data.DataLoader(data, batch_size=None)
    net = _model()
    if expert:
        net = net.to(memory_format=torch.channels_last)
    times: list[float] = []
    lightning_trainer(steps, bf16=expert).fit(lightning_module(net, channels_last=expert, marks=times), data)
    return steps * BATCH / (times[1] - times[0])


def _fasttrain(work: str, cache: Path, runs: Path) -> tuple[float, float]:
    """-> (images/s with the trial counted, trial seconds)."""
    (cache / "tuning.json").unlink(missing_ok=True)  # every round pays its own trial ...
    shutil.rmtree(cache / "decoded", ignore_errors=True)  # ... and decodes the images (datasets/decoded.py) afresh
    cmd = [sys.executable, "-m", "fasttrain", "train", "--profile", "cpu", "--data", DATA[work], "--model",
           "resnet18", "--image-size", str(SIZE), "--epochs", "1", "--runs-dir", str(runs), "--json", "--quiet"]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "FASTTRAIN_CACHE": str(cache)})
    if out.returncode:
        raise SystemExit(f"fasttrain failed ({out.returncode}): {out.stderr[-2000:]}")
    summary = json.loads(out.stdout)
    row = summary["history"][0]
    tuning = Path(summary["run_dir"]) / "tuning.json"
    trial = json.loads(tuning.read_text()).get("spent_s", 0.0) if tuning.exists() else 0.0
    return row["train_images"] / (row["train_s"] + trial), trial


def _peer(way: str, work: str, steps: int, cache: Path) -> float:
    cmd = [sys.executable, __file__, "--peer", way, "--work", work, "--steps", str(steps)]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "FASTTRAIN_CACHE": str(cache)})
    if out.returncode:
        raise SystemExit(f"{way} failed ({out.returncode}): {out.stderr[-2000:]}")
    return float(out.stdout.strip().splitlines()[-1])


def run_peer(way: str, work: str, steps: int) -> float:
    import warnings
    warnings.filterwarnings("ignore")
    if way.startswith("L-"):
        return _lightning(work, steps, way == "L-expert")
    return _plain(work, steps, way == "expert")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30, help="batches each peer trains per round")
    ap.add_argument("--work", nargs="+", default=["a", "b"], choices=["a", "b"])
    ap.add_argument("--target-naive", type=float, default=1.6)
    ap.add_argument("--target-expert", type=float, default=1.0)
    ap.add_argument("--peer", choices=PEERS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.peer:
        print(run_peer(args.peer, args.work[0], args.steps))
        return 0
    try:
        import lightning  # noqa: F401
    except ImportError:
        print("peers.py needs Lightning for two of its peers: pip install -e '.[bench]' (benchmark-only)",
              file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(prefix="fasttrain-peers-"))
    failed = False
    try:
        for work in args.work:
            failed |= _one_work(work, args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failed else 0


def _one_work(work: str, args: argparse.Namespace, tmp: Path) -> bool:
    cache, runs = tmp / "cache", tmp / "runs"
    cache.mkdir(exist_ok=True)
    speeds: dict[str, list[float]] = {w: [] for w in WAYS}
    trials: list[float] = []
    for r in range(args.rounds):
        order = WAYS[r % len(WAYS):] + WAYS[:r % len(WAYS)]   # rotate, so no way always runs first
        for way in order:
            if way == "fasttrain":
                ips, trial = _fasttrain(work, cache, runs)
                trials.append(trial)
            else:
                ips = _peer(way, work, args.steps, cache)
            speeds[way].append(ips)
            print(f"({work}) round {r + 1} {way:10s} {ips:8.1f} images/s", flush=True)
    naive = speeds["naive"]
    from fasttrain.hardware.machine import probe_cpu
    machine = probe_cpu()[0].model
    print(f"\n({work}) {DATA[work]}: resnet18 {SIZE} px, batch {BATCH}, {args.rounds} rounds, medians; CPU: {machine}")
    print(f"{'way':12s} {'images/s':>9s} {'vs naive':>9s}")
    for way in WAYS:
        ratio = statistics.median(s / n for s, n in zip(speeds[way], naive, strict=True))
        print(f"{way:12s} {statistics.median(speeds[way]):9.1f} {ratio:8.2f}x")
    vs_naive = statistics.median(f / n for f, n in zip(speeds["fasttrain"], naive, strict=True))
    vs_expert = statistics.median(f / e for f, e in zip(speeds["fasttrain"], speeds["L-expert"], strict=True))
    print(f"fasttrain / naive    {vs_naive:.2f}x (target {args.target_naive}x)")
    print(f"fasttrain / L-expert {vs_expert:.2f}x (target {args.target_expert}x)")
    print(f"fasttrain's tuning trial: median {statistics.median(trials):.1f} s per run (counted above)\n")
    return vs_naive < args.target_naive or vs_expert < args.target_expert


if __name__ == "__main__":
    sys.exit(main())
