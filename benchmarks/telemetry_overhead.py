"""What the dashboard and telemetry cost a training step (budget: at most 3% of throughput).

Two measurements, both in this one process:
1. Per-call cost (median over many repeats of many calls) of Telemetry.record(), Telemetry.snapshot(),
   Dashboard.update() in each mode, RunLog.log_step(), and one live redraw; then the per-step cost
   record()+update() as a share of a typical 10 ms step.
2. An interleaved A/B run of a real CPU "step" (a chain of torch matmuls taking about --step-ms): the bare
   loop against the same loop with record()+snapshot()+update() every step -- without threads, with the
   sampler thread, and with the sampler plus the live screen (redrawn inline, at most REFRESH_PER_SECOND
   times a second). Every round runs each variant once in a shuffled order, so machine noise hits them all;
   reported is the median over rounds of the per-round ratio to the bare loop, with its quartiles.

Run: .venv/bin/python benchmarks/telemetry_overhead.py [--rounds 40 --steps 50 --step-ms 10]
"""
from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console

from fasttrain.hardware.report import CpuInfo, HardwareReport, MemoryInfo
from fasttrain.plan import make_plan
from fasttrain.profiles import presets
from fasttrain.telemetry.recorder import Telemetry
from fasttrain.telemetry.step_record import StepRecord
from fasttrain.train.run.runlog import RunLog
from fasttrain.ui.dashboard import REFRESH_PER_SECOND, Dashboard


def _plan():
    report = HardwareReport(cpu=CpuInfo(logical_cores=2), memory=MemoryInfo(ram_total_bytes=8 << 30,
                                                                            ram_available_bytes=6 << 30))
    return make_plan(presets.resolve("cpu").profile, report, dataset_size=50_000), report


def _rec(i: int) -> StepRecord:
    return StepRecord(0, i, i % 700, 700, 64, 0.001, 0.0, 0.009, loss=1.0, lr=0.1, grad_norm=2.0, batch_size=64)


REC = _rec(0)


def per_call_us(fn, calls: int = 2000, repeats: int = 15) -> float:
    """Median over repeats of (time for `calls` calls) / calls, in microseconds."""
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for i in range(calls):
            fn(i)
        samples.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(samples)


def micro(plan, report) -> dict[str, float]:
    tel = Telemetry("cpu")
    for i in range(100):
        tel.record(_rec(i))
    out = {"record": per_call_us(lambda i: tel.record(REC))}
    out["StepRecord(...)"] = per_call_us(_rec)
    out["snapshot"] = per_call_us(lambda i: tel.snapshot())
    # what the background thread does once per sample_interval_s (1 s): psutil + /proc (+ NVML on a GPU)
    out["sampler: one sample (bg thread)"] = per_call_us(lambda i: tel.sample_now(), calls=50, repeats=9)
    snap = tel.snapshot()
    for mode in ("plain", "quiet"):
        dash = Dashboard(plan, total_batches=10**6, epochs=1, mode=mode, stream=io.StringIO(), report=report,
                         plain_every_s=10.0)
        with dash:
            out[f"update ({mode})"] = per_call_us(lambda i, dash=dash: dash.update(snap, REC))
    console = Console(file=io.StringIO(), force_terminal=True, width=140)
    with Dashboard(plan, total_batches=10**6, epochs=1, mode="live", console=console, report=report,
                   forecast={"images_per_s": 700.0, "step_time_s": 0.01}) as dash:
        out["update (live)"] = per_call_us(lambda i, dash=dash: dash.update(snap, REC))
        dash.update(snap, REC)
        dash.epoch_end({"epoch": 1, "train_loss": 0.5, "val_acc1": 0.9, "time_s": 10.0})
        # what update() does at most REFRESH_PER_SECOND times a second
        out["live redraw"] = per_call_us(lambda i: dash._live.refresh(), calls=50, repeats=9)
    with tempfile.TemporaryDirectory() as tmp:
        log = RunLog(Path(tmp), tensorboard=True)
        row = {"step": 1, "epoch": 0, "loss": 1.0, "lr": 0.1, "grad_norm": 2.0, "images_per_s": 640.0}
        out["log_step (jsonl + TB queue)"] = per_call_us(lambda i: log.log_step(row), calls=500, repeats=9)
        log.close()
    return out


def ab(plan, report, rounds: int, steps: int, step_ms: float) -> dict[str, tuple[float, float, float, float]]:
    """Each round runs every variant once, in a shuffled order. -> variant: (ms/step, ratio, q1, q3)."""
    import random

    import torch

    torch.set_num_threads(1)  # one core per step keeps the comparison stable on a shared 2-core machine
    n = 128
    a, b = torch.randn(n, n), torch.randn(n, n)
    # size the matmul chain so one step takes about step_ms (median of several timings: the machine is noisy)
    per_mm = []
    for _ in range(9):
        t0 = time.perf_counter()
        for _ in range(50):
            a @ b
        per_mm.append((time.perf_counter() - t0) / 50)
    reps = max(1, round(step_ms / 1000 / statistics.median(per_mm)))

    def step() -> None:
        for _ in range(reps):
            a @ b

    def bare() -> float:
        t = time.perf_counter()
        for _ in range(steps):
            step()
        return time.perf_counter() - t

    def instrumented(mode: str, sampler: bool) -> float:
        """The same steps with record()+snapshot()+update(); threads start before the clock and stop after it."""
        tel = Telemetry("cpu", sample_interval_s=1.0)
        if sampler:
            tel.start()
        console = Console(file=io.StringIO(), force_terminal=True, width=140)
        dash = Dashboard(plan, total_batches=10**9, epochs=1, mode=mode, console=console, stream=io.StringIO(),
                         report=report, forecast={"images_per_s": 700.0, "step_time_s": step_ms / 1000})
        with dash:
            t = time.perf_counter()
            for i in range(steps):
                t1 = time.perf_counter()
                step()
                t2 = time.perf_counter()
                rec = StepRecord(0, i, i, steps, 64, 0.0, 0.0, t2 - t1, lr=0.1, batch_size=64, end_time=t2)
                tel.record(rec)
                dash.update(tel.snapshot(), rec)
            elapsed = time.perf_counter() - t
        tel.stop()
        return elapsed

    variants = {
        "bare loop": bare,
        "+ record/snapshot/update (quiet)": lambda: instrumented("quiet", False),
        "+ sampler thread (quiet)": lambda: instrumented("quiet", True),
        "+ sampler + live screen (full)": lambda: instrumented("live", True),
    }
    for fn in variants.values():  # warm every path once
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    order = list(variants)
    rng = random.Random(0)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            times[name].append(variants[name]())
    out = {}
    for name, ts in times.items():
        pair = sorted(base / t for base, t in zip(times["bare loop"], ts, strict=True))  # vs the same round's bare run
        q1, med, q3 = statistics.quantiles(pair, n=4) if len(pair) >= 2 else (pair[0],) * 3
        out[name] = (statistics.median(ts) / steps * 1000, med, q1, q3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--skip-ab", action="store_true", help="only the per-call figures")
    args = ap.parse_args()
    plan, report = _plan()

    figures = micro(plan, report)
    print(f"{'call':32} {'us/call':>9} {'% of a 10 ms step':>18}")
    for name, us in figures.items():
        print(f"{name:32} {us:9.2f} {us / 10_000:18.3%}")
    per_step = figures["record"] + figures["snapshot"] + figures["update (live)"]
    redraw_share = figures["live redraw"] * REFRESH_PER_SECOND / 1e6
    print(f"\nper step, record()+snapshot()+update(live): {per_step:.1f} us = {per_step / 10_000:.2%} of a 10 ms step")
    print(f"sampler: {figures['sampler: one sample (bg thread)'] / 1000:.2f} ms once a second = "
          f"{figures['sampler: one sample (bg thread)'] / 1e6:.2%} of one core's time (on its own thread)")
    print(f"live redraws: {figures['live redraw'] / 1000:.2f} ms x {REFRESH_PER_SECOND}/s = "
          f"{redraw_share:.2%} of the training thread's time at most")

    if not args.skip_ab:
        results = ab(plan, report, args.rounds, args.steps, args.step_ms)
        print(f"\nA/B interleaved: {args.rounds} rounds x {args.steps} steps of ~{args.step_ms:g} ms, shuffled order;")
        print("ratio = median over rounds of (bare time / this variant's time in the same round); "
              ">= 0.97 is the budget")
        print(f"{'variant':36} {'ms/step':>8} {'ratio':>7} {'quartiles (noise)':>19}")
        for name, (ms, ratio, q1, q3) in results.items():
            print(f"{name:36} {ms:8.3f} {ratio:7.3f} {q1:9.3f} .. {q3:.3f}")

if __name__ == "__main__":
    main()
