"""Where each training step's time goes: fasttrain's step beside the expert's loop and Lightning with an expert's
settings, on the same work, in one process, interleaved rounds (issue 42, item 1).

The work is peers.py's (a): resnet18 at 64 px, batch 64, random tensors in memory, AdamW 3e-3, bf16 autocast and
channels_last on every side (the cpu preset's settings, which the expert sets by hand):
  fasttrain  the real Trainer.train_epoch over a StepEngine built from the cpu preset's plan (fused copy-free AdamW,
             label smoothing, the weight EMA, the LR schedule, telemetry recording each step)
  expert     the five-line loop with torch's fused AdamW
  L-expert   lightning.Trainer(precision="bf16-mixed") with a channels_last model (Lightning: pip install -e
             '.[bench]')
Each round times --steps steps of each way by the wall clock, then the same number under torch.profiler (CPU
activities): each op's self time is put in a group by its name (convolutions forward and backward, batch norm,
other forward/backward ops, optimizer, lerp, dtype and layout copies; lerp is fasttrain's weight average, whose
AdamW is fused, and a foreach AdamW's moment update in Lightning's default AdamW); "framework" is the profiled
step's wall time that no op accounts for (Python, hooks, dispatch). Printed: milliseconds per step, medians of the
rounds, and the CPU model.

  .venv/bin/python benchmarks/step_profile.py [--rounds 2] [--steps 12] [--no-lightning]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

import torch

# peers.py's work (a) and its Lightning peer, the same code: this profile is of what peers.py times
from peers import BATCH, LR, SIZE, lightning_module, lightning_trainer, tensor_batches

GROUPS = ("conv forward", "conv backward", "batch norm", "other ops", "optimizer", "lerp", "copies")


def group_of(name: str) -> str:
    """An op's group by its name (aten::mkldnn_convolution, aten::_fused_adamw_, aten::_foreach_lerp_, ...)."""
    n = name.lower()
    if "convolution_backward" in n:
        return "conv backward"
    if "convolution" in n or "conv2d" in n:
        return "conv forward"
    if "batch_norm" in n:
        return "batch norm"
    if "lerp" in n:   # fasttrain's weight average (its AdamW is fused); a foreach AdamW's moments (Lightning's)
        return "lerp"
    if "adam" in n or "_foreach_" in n or "zero_" in n:
        return "optimizer"
    if "copy" in n or "contiguous" in n or "::to" in n or "clone" in n:
        return "copies"
    return "other ops"


def model() -> torch.nn.Module:
    from fasttrain.models.registry import create_model
    torch.manual_seed(0)
    return create_model("resnet18", 10, image_size=SIZE)


def timed(run: Callable[[list], None]) -> Callable[[list], float]:
    def go(data: list) -> float:
        started = time.perf_counter()
        run(data)
        return time.perf_counter() - started
    return go


def fasttrain_way() -> Callable[[list], float]:
    from fasttrain.hardware.machine import probe
    from fasttrain.plan import make_plan
    from fasttrain.profiles.presets import resolve
    from fasttrain.telemetry.recorder import Telemetry
    from fasttrain.train.loop.events import Collaborators
    from fasttrain.train.loop.step import StepEngine
    from fasttrain.train.loop.trainer import Trainer

    profile = resolve("cpu", sets=["loader.num_workers=0", "loader.prefetch_factor=null",
                                   "loader.persistent_workers=false", f"loader.image_size={SIZE}"]).profile
    plan = make_plan(profile, probe(), dataset_size=10_000)
    engine = StepEngine.build(plan, profile.optim, model(), batches_per_epoch=10_000)
    trainer = Trainer(engine, collaborators=Collaborators(telemetry=Telemetry("cpu")))
    return timed(lambda data: trainer.train_epoch(data, epoch=0, batches=len(data)))


def expert_way() -> Callable[[list], float]:
    net = model().to(memory_format=torch.channels_last)
    opt = torch.optim.AdamW(net.parameters(), lr=LR, fused=True)

    def run(data: list) -> None:
        net.train()
        for x, y in data:
            x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(net(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return timed(run)


def lightning_way() -> Callable[[list], float]:
    """Timed from its first step to its last (on_train_start/on_train_end), as peers.py times it, with peers.py's
    own module and Trainer: a new Trainer each call, whose set-up is not the step's."""
    net = model().to(memory_format=torch.channels_last)
    marks: list[float] = []
    module = lightning_module(net, channels_last=True, marks=marks)

    def run(data: list) -> float:
        marks.clear()
        lightning_trainer(len(data), bf16=True).fit(module, torch.utils.data.DataLoader(data, batch_size=None))
        return marks[1] - marks[0]
    return run


def measure(run: Callable[[list], float], steps: int) -> tuple[float, dict[str, float], float]:
    """-> (wall ms a step unprofiled, {group: ms a step}, profiled wall ms a step)."""
    from torch.profiler import ProfilerActivity, profile

    data = tensor_batches(steps)
    run(tensor_batches(2))   # warm: oneDNN builds its kernels
    wall = run(data) * 1000 / steps
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        profiled = run(data) * 1000 / steps
    groups = dict.fromkeys(GROUPS, 0.0)
    for event in prof.key_averages():
        groups[group_of(event.key)] += event.self_cpu_time_total / 1000 / steps   # us -> ms, per step
    return wall, groups, profiled


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--no-lightning", action="store_true")
    args = ap.parse_args()
    threads = len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    makers = {"fasttrain": fasttrain_way, "expert": expert_way}
    if not args.no_lightning:
        makers["L-expert"] = lightning_way
    ways = {name: make() for name, make in makers.items()}
    torch.set_num_threads(threads)   # the plan's backends may have set it
    rows: dict[str, list[tuple[float, dict[str, float], float]]] = {w: [] for w in ways}
    for r in range(args.rounds):
        order = list(ways)[r % len(ways):] + list(ways)[:r % len(ways)]
        for way in order:
            rows[way].append(measure(ways[way], args.steps))
            print(f"# round {r + 1} {way}: {rows[way][-1][0]:.1f} ms a step", file=sys.stderr, flush=True)
    from fasttrain.hardware.machine import probe_cpu
    print(f"\nCPU: {probe_cpu()[0].model}, {threads} threads; resnet18 "
          f"{SIZE} px, batch {BATCH}, bf16 + channels_last, {args.steps} steps x {args.rounds} rounds, medians, "
          "ms a step")
    print("| way | step (wall) | " + " | ".join(GROUPS) + " | framework (profiled) |")
    print("| --- | ---: | " + " | ".join("---:" for _ in GROUPS) + " | ---: |")
    for way, got in rows.items():
        wall = statistics.median(g[0] for g in got)
        parts = {k: statistics.median(g[1][k] for g in got) for k in GROUPS}
        framework = statistics.median(g[2] - sum(g[1].values()) for g in got)
        print(f"| {way} | {wall:.1f} | " + " | ".join(f"{parts[k]:.1f}" for k in GROUPS) + f" | {framework:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
