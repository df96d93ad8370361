"""CPU side of the calibration: measure real training steps here and fit the CPU efficiency factors.

Used by `calibrate.py --cpu` (fit) and by estimate_accuracy.py (check). The calibration models and sizes
are deliberately NOT the ones estimate_accuracy.py checks (resnet18/resnet50/efficientnet_b0 at 64 px),
so the accuracy check is a check, not a replay of the fit. Every measurement re-measures the ceiling just
before it (this machine is shared: both see the same neighbours), steps run through the train step code
(trainer.run_synthetic_steps), and each case is measured in several interleaved rounds (medians).
"""
from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from fasttrain.estimate.roofline import Ceilings, OpTable, step_time  # noqa: E402

# (model, image size, batch): conv nets of different shapes; none of them is in the accuracy check.
CALIBRATION_CASES = [
    ("resnet34", 64, 8),
    ("mobilenetv3_large_100", 64, 8),
    ("tiny_cnn", 32, 32),
    ("resnet18", 96, 8),
    ("efficientnet_b1", 64, 8),
]


def cpu_plan(batch: int, image_size: int):
    from fasttrain.hardware import machine as hardware
    from fasttrain.plan import make_plan
    from fasttrain.profiles import presets
    prof = presets.resolve("cpu", sets=[f"loader.batch_size={batch}", f"loader.image_size={image_size}"]).profile
    return make_plan(prof, hardware.probe()), prof


# Seconds of timed steps per measurement (the step count follows from the forecast step time): 3 steps of a
# ResNet-50 at batch 8 were ~1 s and one neighbour's time slice moved the result by 30%.
MEASURE_SECONDS = 2.0
MIN_STEPS, MAX_STEPS = 3, 60


def steps_for(forecast_step_s: float, seconds: float = MEASURE_SECONDS) -> int:
    """Timed steps so one measurement lasts about `seconds`."""
    return max(MIN_STEPS, min(MAX_STEPS, math.ceil(seconds / max(forecast_step_s, 1e-6))))


def measure_case(model: str, image_size: int, batch: int, steps: int | None = None) -> dict:
    """One interleave slot: the ceiling just before AND just after real steps (geometric mean), at the
    threads, dtype and layout `train` uses, so the forecast sees the same neighbours the steps saw. The plan is
    the shipped `cpu` preset (its precision, layout and workers) at this batch and size. steps: None = enough
    for ~MEASURE_SECONDS at the forecast speed. -> images/s, ceiling, op table."""
    from fasttrain.estimate import calibration, cost, cpu_ceiling
    from fasttrain.estimate.gather import cpu_dtype, cpu_threads_for
    from fasttrain.models import registry as models
    from fasttrain.train.loop import synthetic as trainer
    plan, prof = cpu_plan(batch, image_size)
    threads = cpu_threads_for(plan)
    net = models.create_model(model, num_classes=1000)
    c = cost.model_cost(model, image_size, num_classes=1000, precision=plan.precision)
    table = OpTable.from_ops(c.ops)
    before = cpu_ceiling.measure(threads, cpu_dtype(plan), plan.channels_last, reuse_s=0.0)
    if steps is None:
        dev = calibration.cpu_ceilings(before.peak_flops, before.bandwidth, None,
                                       conv_weight_s_per_byte=before.conv_weight_s_per_byte)
        steps = steps_for(step_time(table, batch, dev.ceilings, params=c.params, optimizer=prof.optim.optimizer,
                                    mixed_precision=plan.precision != "fp32", fused_optimizer=False).seconds)
    got = trainer.run_synthetic_steps(plan, net, image_size=image_size, num_classes=1000, steps=steps,
                                      warmup_steps=2, optim=prof.optim)
    after = cpu_ceiling.measure(threads, cpu_dtype(plan), plan.channels_last, reuse_s=0.0)
    print(f"    {steps} steps {got['images_per_s']:.1f} images/s between ceilings {before.peak_flops / 1e9:.0f} and "
          f"{after.peak_flops / 1e9:.0f} GFLOP/s, conv weights {before.conv_weight_s_per_byte * 1e9:.2f} and "
          f"{after.conv_weight_s_per_byte * 1e9:.2f} ns/byte ({threads} threads, {plan.precision})", flush=True)
    return {"model": model, "image_size": image_size, "batch": batch, "images_per_s": got["images_per_s"],
            "peak_flops": math.sqrt(before.peak_flops * after.peak_flops),
            "bandwidth": math.sqrt(before.bandwidth * after.bandwidth),
            "conv_weight_s_per_byte": (before.conv_weight_s_per_byte + after.conv_weight_s_per_byte) / 2,
            "params": c.params, "optimizer": prof.optim.optimizer, "precision": plan.precision, "table": table}


ROUND_KEYS = ("images_per_s", "peak_flops", "bandwidth", "conv_weight_s_per_byte")


def measure_rounds(cases: list[tuple[str, int, int]], rounds: int = 3, log=print) -> list[dict]:
    """Interleave: round 1 runs every case once, then round 2, ... ; medians per case."""
    seen: dict[tuple, list[dict]] = {}
    for r in range(rounds):
        for case in cases:
            m = measure_case(*case)
            seen.setdefault(case, []).append(m)
            log(f"  round {r + 1} {case[0]}@{case[1]} b{case[2]}: {m['images_per_s']:.1f} images/s, "
                f"ceiling {m['peak_flops'] / 1e9:.0f} GFLOP/s, {m['bandwidth'] / 1e9:.1f} GB/s")
    out = []
    for _case, ms in seen.items():
        first = ms[0]
        out.append(first | {"images_per_s": statistics.median(m["images_per_s"] for m in ms),
                            "peak_flops": statistics.median(m["peak_flops"] for m in ms),
                            "bandwidth": statistics.median(m["bandwidth"] for m in ms),
                            "conv_weight_s_per_byte": statistics.median(m["conv_weight_s_per_byte"] for m in ms),
                            "each_round": [{k: m[k] for k in ROUND_KEYS} for m in ms]})
    return out


def forecast_cpu(m: dict, f: dict) -> float:
    c = Ceilings(peak_flops=m["peak_flops"], bandwidth=m["bandwidth"], compute_efficiency=f["compute_efficiency"],
                 memory_efficiency=f["memory_efficiency"], depthwise_efficiency=f["depthwise_efficiency"],
                 depthwise_backward_efficiency=f.get("depthwise_backward_efficiency"),
                 op_overhead_s=f["op_overhead_s"], conv_weight_s_per_byte=m.get("conv_weight_s_per_byte", 0.0))
    return m["batch"] / step_time(m["table"], m["batch"], c, params=m["params"], optimizer=m["optimizer"],
                                 mixed_precision=m.get("precision", "fp32") != "fp32",
                                 fused_optimizer=False).seconds  # the CPU runs torch.optim's foreach path


# Stated from profiling, not fitted: the fit cases cannot tell a depthwise forward from its backward (every model
# has twice the FLOPs in the backward), and torch.profiler on EfficientNet-B0 at 64 px b8 (bf16, channels_last,
# 1 thread) put the depthwise forward at 0.02-0.17 of the matmul rate (0.08 over the step, 2 ms of ~210 ms).
ASSUMED_CPU = {"depthwise_efficiency": 0.08}


def fit(measured: list[dict]) -> dict:
    """Grid search over the CPU factors (the conv weight cost is measured, ASSUMED_CPU stated). The depthwise
    backward gets its own factor: profiled, it runs ~60x slower per FLOP than the forward."""
    best = None
    for ec in np.geomspace(0.05, 1.0, 24):
        for em in np.geomspace(0.05, 1.0, 18):
            for dwb in np.geomspace(0.0002, 0.05, 16):
                for oh in (0.0, 1e-5, 2e-5, 4e-5, 8e-5, 1.2e-4, 1.6e-4):
                    f = {"compute_efficiency": float(ec), "memory_efficiency": float(em),
                         "depthwise_backward_efficiency": float(dwb), "op_overhead_s": oh, **ASSUMED_CPU}
                    err = sum(math.log(forecast_cpu(m, f) / m["images_per_s"]) ** 2 for m in measured)
                    if best is None or err < best[0]:
                        best = (err, f)
    return best[1]


MEASUREMENTS = ROOT / "benchmarks" / "cpu_measurements.json"


def fit_cpu(refit_only: bool = False) -> tuple[dict, dict]:
    """Measure (or, with refit_only, reuse benchmarks/cpu_measurements.json) and fit the CPU factors."""
    import datetime as dt
    import json

    from fasttrain.estimate import cost
    if refit_only:
        raw = json.loads(MEASUREMENTS.read_text())
    else:
        raw = [{k: v for k, v in m.items() if k != "table"} for m in measure_rounds(CALIBRATION_CASES)]
        MEASUREMENTS.write_text(json.dumps(raw, indent=2) + "\n")
    measured = []
    for m in raw:
        plan, _prof = cpu_plan(m["batch"], m["image_size"])
        c = cost.model_cost(m["model"], m["image_size"], num_classes=1000, precision=plan.precision)
        measured.append(m | {"table": OpTable.from_ops(c.ops), "params": c.params, "precision": plan.precision})
    factors = fit(measured)
    report = [{"case": f"{m['model']}@{m['image_size']} b{m['batch']}", "measured": round(m["images_per_s"], 2),
               "forecast": round(forecast_cpu(m, factors), 2)} for m in measured]
    info = {"method": "per-op roofline over the ceiling measured just before and after each case (geometric mean of "
                      "matmul FLOP/s in the plan's dtype and copy bandwidth, mean of the small-conv probe's seconds "
                      "per conv weight byte, used as measured; each a mean over ~60 ms so neighbours' time slices "
                      "count); grid search minimising squared log(forecast/measured), efficiencies capped at 1; "
                      f"assumed from profiling, not fitted: {ASSUMED_CPU}; "
                      "3 interleaved rounds of ~2 s of steps each, medians; raw data in "
                      "benchmarks/cpu_measurements.json",
            "plan": "the shipped cpu preset at each case's batch and image size",
            "fitted_on": report, "machine": _machine(),
            "fitted_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")}
    return factors, info


def _machine() -> str:
    import os
    import platform
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} logical cores"
