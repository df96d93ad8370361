"""Refit the efficiency factors of `fasttrain estimate` and write src/fasttrain/data/calibration.json.

GPU factors: fitted to every row of benchmarks/reference_throughput.csv (published training images/s from
NVIDIA DeepLearningExamples, timm and Lambda, each row with its source) by benchmarks/gpu_fit.py: the
factors of the variant benchmarks/gpu_cv.py cross-validates best (docs/estimate.md). One multi-GPU scaling
efficiency from the 8-GPU rows.
CPU factors: fitted to training steps measured on THIS machine (`--cpu`), on models and sizes that are
NOT the ones benchmarks/estimate_accuracy.py checks, so that check stays honest.

    .venv/bin/python benchmarks/calibrate.py          # GPU factors (about a minute, no GPU needed)
    .venv/bin/python benchmarks/calibrate.py --cpu    # CPU factors too (a few minutes of measured steps)
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "src" / "fasttrain" / "data" / "calibration.json"
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_fit  # noqa: E402
from gpu_cv import SHIPPED, VARIANTS  # noqa: E402
from gpu_fit import ASSUMED_GPU, REFERENCE, Row, reference_rows  # noqa: E402

MEMORY = {
    "cuda_context_bytes": 500 * 2**20,   # CUDA context + cuDNN/cuBLAS handles (nvidia-smi shows it, torch does not)
    "workspace_bytes": 512 * 2**20,      # cuDNN / cuBLAS workspaces at benchmark autotuning
    "allocator_overhead": 1.10,          # caching-allocator fragmentation over the live bytes
    "autocast_weight_copy_bytes_per_param": 2,  # the fp16/bf16 copy of weights autocast caches per step
    "process_overhead_bytes_gpu": 3 * 2**30,    # main process host RAM with torch + CUDA loaded
    "process_overhead_bytes_cpu": 1 * 2**30,    # main process host RAM on a CPU-only run
    "worker_overhead_bytes": 300 * 2**20,       # one DataLoader worker process (python + torch + decode buffers)
}


def forecast_row(row: Row, factors: dict) -> float | None:
    """Images/s the estimate model gives for one published row (None if the GPU's peaks are unknown)."""
    return gpu_fit.forecast_row(row, factors, gpu_fit.op_tables([row]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="also refit the CPU factors from steps measured here")
    ap.add_argument("--cpu-refit", action="store_true",
                    help="refit the CPU factors from benchmarks/cpu_measurements.json without measuring")
    args = ap.parse_args(argv)
    old = json.loads(OUTPUT.read_text()) if OUTPUT.exists() else {}
    rows = reference_rows()
    tables = gpu_fit.op_tables(rows)
    gpu = gpu_fit.fit(rows, tables, VARIANTS[SHIPPED])
    out = dict(old)
    out["gpu"] = gpu
    out["memory"] = MEMORY
    single = [r for r in rows if r.num_gpus == 1]
    fit = gpu_fit.summarise(gpu_fit.log_errors(single, out, tables))
    out["gpu_fit"] = {
        "fitted_on": f"{REFERENCE.relative_to(ROOT)} ({len(rows)} rows, {len(single)} single-GPU)",
        "method": "per-op roofline (calibration.gpu_ceilings); log-space coordinate descent minimising squared "
                  "log(forecast/published) over the single-GPU rows (benchmarks/gpu_fit.py); free: compute "
                  "efficiency per precision family (fp32, tf32, amp), memory efficiency (fp32/tf32 and amp), "
                  "depthwise efficiency against the CUDA-core fp32 peak, NCHW transpose bytes per convolution "
                  "under AMP; multi_gpu_efficiency = median published / (forecast single x GPUs); "
                  f"assumed, not fitted: {sorted(ASSUMED_GPU)}; efficiencies capped at 1; the in-sample figures "
                  "below are not the accuracy claim: benchmarks/gpu_cv.py cross-validates (docs/estimate.md)",
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
