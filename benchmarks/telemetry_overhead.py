"""What the dashboard and telemetry cost a training step (budget: at most 3% of throughput).

Two measurements, both in this one process:
1. Per-call cost (median over many repeats of many calls) of Telemetry.record(), Telemetry.snapshot(),
   Dashboard.update() in each mode, RunLog.log_step(), and one live redraw; then the per-step cost
   record()+update() as a share of a typical 10 ms step.
2. An interleaved A/B run of a real CPU "step" (a torch matmul of about --step-ms): A = the bare loop,
   B = the same loop with the sampler thread, record()+snapshot()+update() every step, and the live
   screen redrawing REFRESH_PER_SECOND times a second on Rich's thread. Rounds alternate A, B, A, B...
   so machine noise hits both; the ratio of the median round times is reported.

Run: .venv/bin/python benchmarks/telemetry_overhead.py [--rounds 10 --steps 100 --step-ms 10]
"""
from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console

from fasttrain import presets
from fasttrain.dashboard import REFRESH_PER_SECOND, Dashboard
from fasttrain.plan import make_plan
from fasttrain.report import CpuInfo, HardwareReport, MemoryInfo
from fasttrain.runlog import RunLog
from fasttrain.telemetry import StepRecord, Telemetry


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
            out[f"update ({mode})"] = per_call_us(lambda i: dash.update(snap, REC))
    console = Console(file=io.StringIO(), force_terminal=True, width=140)
    with Dashboard(plan, total_batches=10**6, epochs=1, mode="live", console=console, report=report,
                   forecast={"images_per_s": 700.0, "step_time_s": 0.01}) as dash:
        out["update (live)"] = per_call_us(lambda i: dash.update(snap, REC))
        dash.update(snap, REC)
        dash.epoch_end({"epoch": 1, "train_loss": 0.5, "val_acc1": 0.9, "time_s": 10.0})
        # what Rich's refresh thread does REFRESH_PER_SECOND times a second
        out["live redraw (Rich thread)"] = per_call_us(lambda i: dash._live.refresh(), calls=50, repeats=9)
    with tempfile.TemporaryDirectory() as tmp:
        log = RunLog(Path(tmp), tensorboard=True)
        row = {"step": 1, "epoch": 0, "loss": 1.0, "lr": 0.1, "grad_norm": 2.0, "images_per_s": 640.0}
        out["log_step (jsonl + TB queue)"] = per_call_us(lambda i: log.log_step(row), calls=500, repeats=9)
        log.close()
    return out


def ab(plan, report, rounds: int, steps: int, step_ms: float) -> tuple[float, float, float]:
    import torch

    torch.set_num_threads(1)  # one core per step keeps the comparison stable on a shared 2-core machine
    n = 64
    a, b = torch.randn(n, n), torch.randn(n, n)
    # size the matmul chain so one step takes about step_ms
    t0 = time.perf_counter()
    for _ in range(200):
        a @ b
    reps = max(1, round(step_ms / 1000 / ((time.perf_counter() - t0) / 200)))

    def step() -> None:
        for _ in range(reps):
            a @ b

    def bare() -> float:
        t = time.perf_counter()
        for _ in range(steps):
            step()
        return time.perf_counter() - t

    tel = Telemetry("cpu", sample_interval_s=1.0).start()
    console = Console(file=io.StringIO(), force_terminal=True, width=140)
    dash = Dashboard(plan, total_batches=10**9, epochs=1, mode="live", console=console, report=report,
                     forecast={"images_per_s": 700.0, "step_time_s": step_ms / 1000})
    dash.__enter__()

    def instrumented() -> float:
        t = time.perf_counter()
        for i in range(steps):
            t1 = time.perf_counter()
            step()
            rec = StepRecord(0, i, i, steps, 64, 0.0, 0.0, time.perf_counter() - t1, lr=0.1, batch_size=64)
            tel.record(rec)
            dash.update(tel.snapshot(), rec)
        return time.perf_counter() - t

    bare()
    instrumented()  # warm both paths
    times_a, times_b = [], []
    for _ in range(rounds):
        times_a.append(bare())
        times_b.append(instrumented())
    dash.close(None)
    tel.stop()
    ma, mb = statistics.median(times_a), statistics.median(times_b)
    pair = sorted(a / b for a, b in zip(times_a, times_b))  # each B beside the A run just before it
    quart = statistics.quantiles(pair, n=4) if len(pair) >= 2 else [pair[0]] * 3
    return ma / steps * 1000, mb / steps * 1000, ma / mb, (quart[0], quart[2])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--step-ms", type=float, default=10.0)
    ap.add_argument("--skip-ab", action="store_true", help="only the per-call figures")
    args = ap.parse_args()
    plan, report = _plan()

    figures = micro(plan, report)
    print(f"{'call':32} {'us/call':>9} {'% of a 10 ms step':>18}")
    for name, us in figures.items():
        print(f"{name:32} {us:9.2f} {us / 10_000:18.3%}")
    per_step = figures["record"] + figures["snapshot"] + figures["update (live)"]
    redraw_share = figures["live redraw (Rich thread)"] * REFRESH_PER_SECOND / 1e6
    print(f"\nper step, record()+snapshot()+update(live): {per_step:.1f} us = {per_step / 10_000:.2%} of a 10 ms step")
    print(f"sampler: {figures['sampler: one sample (bg thread)'] / 1000:.2f} ms once a second = "
          f"{figures['sampler: one sample (bg thread)'] / 1e6:.2%} of one core's time (on its own thread)")
    print(f"live redraws: {figures['live redraw (Rich thread)'] / 1000:.2f} ms x {REFRESH_PER_SECOND}/s = "
          f"{redraw_share:.2%} of one core's time (on Rich's thread)")

    if not args.skip_ab:
        a_ms, b_ms, ratio, (q1, q3) = ab(plan, report, args.rounds, args.steps, args.step_ms)
        print(f"\nA/B interleaved, {args.rounds} rounds x {args.steps} steps, median round time:")
        print(f"  bare loop          {a_ms:7.3f} ms/step")
        print(f"  with telemetry+live {b_ms:6.3f} ms/step")
        print(f"  throughput ratio (with/bare): {ratio:.4f}  (target >= 0.97); "
              f"per-pair ratios, quartiles: {q1:.3f} .. {q3:.3f} (machine noise)")


if __name__ == "__main__":
    main()
