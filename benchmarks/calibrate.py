"""Refit the efficiency factors of `fasttrain estimate` and write src/fasttrain/data/calibration.json.

GPU factors: fitted to every row of benchmarks/reference_throughput.csv (published training images/s from
NVIDIA DeepLearningExamples and timm, each row with its source). One compute efficiency per
precision x memory layout group, one memory-bandwidth efficiency and one depthwise-conv efficiency shared
by all, one multi-GPU scaling efficiency; least squares on log(forecast / published), by grid search.
CPU factors: fitted to training steps measured on THIS machine (`--cpu`), on models and sizes that are
NOT the ones benchmarks/estimate_accuracy.py checks, so that check stays honest.

    .venv/bin/python benchmarks/calibrate.py          # GPU factors (about a minute, no GPU needed)
    .venv/bin/python benchmarks/calibrate.py --cpu    # CPU factors too (a few minutes of measured steps)
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "benchmarks" / "reference_throughput.csv"
OUTPUT = ROOT / "src" / "fasttrain" / "data" / "calibration.json"
sys.path.insert(0, str(ROOT / "src"))

from fasttrain.hardware import gpus  # noqa: E402
from fasttrain.estimate import calibration
from fasttrain.estimate.roofline import OpTable, step_time  # noqa: E402

# Factors nothing published can fit: stated, not fitted (see docs/estimate.md).
ASSUMED_GPU = {
    "op_overhead_s": 5e-6,          # CUDA kernel launch + PyTorch dispatch per aten call, eager mode
    "compile_pointwise_bytes": 0.6,  # torch.compile fuses pointwise chains: ~40% less of their traffic (assumed)
}
MEMORY = {
    "cuda_context_bytes": 500 * 2**20,   # CUDA context + cuDNN/cuBLAS handles (nvidia-smi shows it, torch does not)
    "workspace_bytes": 512 * 2**20,      # cuDNN / cuBLAS workspaces at benchmark autotuning
    "allocator_overhead": 1.10,          # caching-allocator fragmentation over the live bytes
    "autocast_weight_copy_bytes_per_param": 2,  # the fp16/bf16 copy of weights autocast caches per step
    "process_overhead_bytes_gpu": 3 * 2**30,    # main process host RAM with torch + CUDA loaded
    "process_overhead_bytes_cpu": 1 * 2**30,    # main process host RAM on a CPU-only run
    "worker_overhead_bytes": 300 * 2**20,       # one DataLoader worker process (python + torch + decode buffers)
}


@dataclass(frozen=True)
class Row:
    model: str
    image_size: int
    gpu: str
    precision: str
    tf32: bool
    channels_last: bool
    batch: int
    num_gpus: int
    images_per_s: float
    source: str

    @property
    def label(self) -> str:
        layout = "NHWC" if self.channels_last else "NCHW"
        prec = "TF32" if self.tf32 else {"fp16-mixed": "AMP", "fp32": "FP32"}[self.precision]
        return f"{self.model}@{self.image_size} {self.gpu} {prec} {layout} b{self.batch} x{self.num_gpus}"


def reference_rows(path: Path = REFERENCE) -> list[Row]:
    rows = []
    with path.open(encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            model = r["model"].replace("_v1.5", "")
            size = 224
            m = re.match(r"(\S+) \((\d+)px\)", model)
            if m:
                model, size = m.group(1), int(m.group(2))
            prec = r["precision"].lower()
            amp = prec.startswith("amp")
            if "channels_last" in prec or "nchw" in prec:
                channels_last = "channels_last" in prec
            else:  # DeepLearningExamples: the 2022 README runs AMP in NHWC, the 2020 one NCHW throughout
                channels_last = amp and "@5843f4e5" in r["source"]
            rows.append(Row(model, size, r["gpu"], "fp16-mixed" if amp else "fp32", prec == "tf32", channels_last,
                            int(r["batch_per_gpu"]), int(r["num_gpus"]), float(r["images_per_sec"]), r["source"]))
    return rows


_TABLES: dict[tuple[str, int, str], tuple[OpTable, int]] = {}


def table_for(model: str, image_size: int, precision: str) -> tuple[OpTable, int]:
    key = (model, image_size, precision)
    if key not in _TABLES:
        from fasttrain.estimate import cost
        c = cost.model_cost(model, image_size, num_classes=1000, precision=precision)
        _TABLES[key] = (OpTable.from_ops(c.ops), c.params)
    return _TABLES[key]


def forecast_row(row: Row, factors: dict) -> float | None:
    """Images/s the estimate model gives for one published row (None if the GPU's peaks are unknown)."""
    spec = gpus.get_gpu(row.gpu)
    dev = calibration.gpu_ceilings(spec, row.precision, row.tf32, row.channels_last, factors)
    if dev.ceilings is None:
        return None
    table, params = table_for(row.model, row.image_size, row.precision)
    t = step_time(table, row.batch, dev.ceilings, params=params, optimizer="sgd",
                  mixed_precision=row.precision != "fp32")
    per_gpu = row.batch / t.seconds
    return per_gpu * row.num_gpus * (dev.multi_device_efficiency if row.num_gpus > 1 else 1.0)


def _log_errors(rows: list[Row], factors: dict) -> list[float]:
    out = []
    for r in rows:
        f = forecast_row(r, factors)
        out.append(math.log(f / r.images_per_s) if f else 0.0)
    return out


def fit_gpu(rows: list[Row]) -> dict:
    groups = sorted({calibration.group_key(r.precision, r.tf32, r.channels_last) for r in rows})
    single = [r for r in rows if r.num_gpus == 1]
    best: tuple[float, dict] | None = None
    for em in np.geomspace(0.2, 1.0, 13):
        for dw in np.geomspace(0.02, 1.0, 12):
            factors = {"gpu": {"compute_efficiency": {}, "memory_efficiency": float(em),
                               "depthwise_efficiency": float(dw), "multi_gpu_efficiency": 1.0, **ASSUMED_GPU}}
            total = 0.0
            for g in groups:
                members = [r for r in single if calibration.group_key(r.precision, r.tf32, r.channels_last) == g]
                best_g = None
                for ec in np.geomspace(0.05, 1.0, 30):
                    factors["gpu"]["compute_efficiency"][g] = float(ec)
                    err = sum(e * e for e in _log_errors(members, factors))
                    if best_g is None or err < best_g[0]:
                        best_g = (err, float(ec))
                factors["gpu"]["compute_efficiency"][g] = best_g[1]
                total += best_g[0]
            if best is None or total < best[0]:
                best = (total, json.loads(json.dumps(factors)))
    factors = best[1]
    multi = [r for r in rows if r.num_gpus > 1]
    if multi:  # scaling efficiency: median of published / (single-GPU forecast x GPUs)
        ratios = [r.images_per_s / forecast_row(r, factors) for r in multi]
        factors["gpu"]["multi_gpu_efficiency"] = float(statistics.median(ratios))
    return factors["gpu"]


def summarise(rows: list[Row], factors: dict) -> dict:
    errs = [abs(e) for e in _log_errors(rows, factors)]
    within = sum(e <= math.log(1.5) for e in errs)
    return {"rows": len(rows), "within_1.5x": within, "share_within_1.5x": round(within / len(rows), 3),
            "median_abs_log_error": round(statistics.median(errs), 3), "max_ratio": round(math.exp(max(errs)), 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="also refit the CPU factors from steps measured here")
    ap.add_argument("--cpu-refit", action="store_true",
                    help="refit the CPU factors from benchmarks/cpu_measurements.json without measuring")
    args = ap.parse_args(argv)
    old = json.loads(OUTPUT.read_text()) if OUTPUT.exists() else {}
    rows = reference_rows()
    gpu = fit_gpu(rows)
    out = dict(old)
    out["gpu"] = gpu
    out["memory"] = MEMORY
    fit = summarise(rows, out)
    out["gpu_fit"] = {
        "fitted_on": f"{REFERENCE.relative_to(ROOT)} (all {len(rows)} rows)",
        "method": "per-op roofline; grid search minimising squared log(forecast/published); "
                  "compute_efficiency per precision x layout group, shared memory and depthwise efficiency, "
                  "multi_gpu_efficiency = median published / (forecast single x GPUs); "
                  f"assumed, not fitted: {sorted(ASSUMED_GPU)}",
        "fitted_at": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        **fit,
    }
    if args.cpu or args.cpu_refit:
        import cpu_fit  # benchmarks/cpu_fit.py: measures steps here
        out["cpu"], out["cpu_fit"] = cpu_fit.fit_cpu(refit_only=args.cpu_refit)
    OUTPUT.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(json.dumps({k: out[k] for k in ("gpu", "gpu_fit")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
