"""Fit the GPU factors of `fasttrain estimate` to published rows, and forecast rows with given factors.

Shared by benchmarks/calibrate.py (fit on every row, write data/calibration.json) and benchmarks/gpu_cv.py
(fit on all rows but one GPU / model family / source, forecast the rows left out). The forecast is the very
function `estimate` uses (calibration.gpu_ceilings + roofline.step_time); only the factors are fitted.

Free factors (log-space coordinate descent on squared log(forecast / published), numpy only):
compute efficiency per precision family (fp32 CUDA cores, TF32, AMP tensor cores), memory-bandwidth
efficiency (fp32/TF32 and AMP apart), depthwise efficiency against the CUDA-core fp32 peak, and the NCHW
transpose traffic of a convolution under AMP. Everything else is physics from data/gpus.csv or stated.
"""
from __future__ import annotations

import csv
import hashlib
import math
import pickle
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "benchmarks" / "reference_throughput.csv"
sys.path.insert(0, str(ROOT / "src"))

from fasttrain.estimate import calibration  # noqa: E402
from fasttrain.estimate.roofline import OpTable, step_time  # noqa: E402
from fasttrain.hardware import gpus  # noqa: E402

# Factors nothing published can fit: stated, not fitted (see docs/estimate.md).
ASSUMED_GPU = {
    "op_overhead_s": 5e-6,          # CUDA kernel launch + PyTorch dispatch per aten call, eager mode
    "compile_pointwise_bytes": 0.6,  # torch.compile fuses pointwise chains: ~40% less of their traffic (assumed)
}
# name -> (lowest, highest, start); efficiencies are shares of a roof, so at most 1.
FREE = {
    "eff_fp32": (0.05, 1.0, 0.6), "eff_tf32": (0.05, 1.0, 0.4), "eff_amp": (0.05, 1.0, 0.4),
    "memory_efficiency": (0.1, 1.0, 0.5), "amp_memory_efficiency": (0.1, 1.0, 0.5),
    "depthwise_efficiency": (0.01, 1.0, 0.2), "nchw_amp_conv_bytes": (0.0, 4.0, 0.5),
}
FAMILIES = [("efficientnet", "efficientnet"), ("mobilenet", "mobilenet|mnasnet"), ("vit", "vit_|deit_"),
            ("swin", "swin"), ("convnext", "convnext"), ("resnext", "resnext"), ("densenet", "densenet"),
            ("vgg", "vgg"), ("regnet", "regnet"), ("resnet", "resnet")]


@dataclass(frozen=True)
class Row:
    model: str
    image_size: int
    gpu: str          # the spec-file name
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

    @property
    def family(self) -> str:
        return next(name for name, pattern in FAMILIES if re.search(pattern, self.model))

    @property
    def gpu_model(self) -> str:
        """The GPU without its memory size: leaving out 'A100' leaves out the 40 GB and the 80 GB boards."""
        return re.sub(r"\s*\d+GB", "", self.gpu)

    @property
    def source_group(self) -> str:
        for key, name in (("@5843f4e5", "DeepLearningExamples 2022"), ("@90610830", "DeepLearningExamples 2020"),
                          ("pytorch-image-models", "timm"), ("lambdal/", "Lambda")):
            if key in self.source:
                return name
        return self.source.split(" ")[0]


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
            rows.append(Row(model, size, gpus.get_gpu(r["gpu"]).name, "fp16-mixed" if amp else "fp32",
                            prec.startswith("tf32"), channels_last, int(r["batch_per_gpu"]), int(r["num_gpus"]),
                            float(r["images_per_sec"]), r["source"]))
    return rows


def _cache_file() -> Path:
    import timm
    import torch

    from fasttrain.core.cache_dir import writable_cache_dir
    cost_src = (ROOT / "src" / "fasttrain" / "estimate" / "cost.py").read_bytes()
    key = hashlib.sha256(cost_src + torch.__version__.encode() + timm.__version__.encode()).hexdigest()[:16]
    return writable_cache_dir() / f"gpu-fit-op-tables-{key}.pkl"


def op_tables(rows: list[Row]) -> dict[tuple[str, int, str], tuple[OpTable, int]]:
    """(model, image size, precision) -> (op table, params), counted on the meta device once and cached."""
    path = _cache_file()
    tables = pickle.loads(path.read_bytes()) if path.exists() else {}
    missing = sorted({(r.model, r.image_size, r.precision) for r in rows} - set(tables))
    if missing:
        from fasttrain.estimate import cost
        for key in missing:
            c = cost.model_cost(key[0], key[1], num_classes=1000, precision=key[2])
            tables[key] = (OpTable.from_ops(c.ops), c.params)
        path.write_bytes(pickle.dumps(tables))
    return tables


def factors_json(x: dict[str, float], variant: set[str]) -> dict:
    """Free values -> the calibration.json 'gpu' section (with the assumed factors)."""
    g = {"compute_efficiency": {"fp32": x["eff_fp32"], "tf32": x["eff_tf32"], "amp": x["eff_amp"]},
         "memory_efficiency": x["memory_efficiency"], "depthwise_efficiency": x["depthwise_efficiency"],
         "nchw_amp_conv_bytes": x["nchw_amp_conv_bytes"] if "nchw_amp_conv_bytes" in variant else 0.0,
         "multi_gpu_efficiency": x.get("multi_gpu_efficiency", 1.0), **ASSUMED_GPU}
    if "amp_memory_efficiency" in variant:
        g["amp_memory_efficiency"] = x["amp_memory_efficiency"]
    return {"gpu": g}


def forecast_row(row: Row, factors: dict, tables: dict) -> float | None:
    """Images/s the estimate model gives for one published row (None if the GPU's peaks are unknown)."""
    spec = gpus.get_gpu(row.gpu)
    dev = calibration.gpu_ceilings(spec, row.precision, row.tf32, row.channels_last, factors)
    if dev.ceilings is None:
        return None
    table, params = tables[(row.model, row.image_size, row.precision)]
    t = step_time(table, row.batch, dev.ceilings, params=params, optimizer="sgd",
                  mixed_precision=row.precision != "fp32")
    per_gpu = row.batch / t.seconds
    return per_gpu * row.num_gpus * (dev.multi_device_efficiency if row.num_gpus > 1 else 1.0)


def log_errors(rows: list[Row], factors: dict, tables: dict) -> list[float]:
    out = []
    for r in rows:
        f = forecast_row(r, factors, tables)
        out.append(math.log(f / r.images_per_s) if f else 0.0)
    return out


def fit(rows: list[Row], tables: dict, variant: set[str], sweeps: int = 4) -> dict:
    """Coordinate descent in log space over the variant's free factors, on the single-GPU rows; then the
    multi-GPU scaling efficiency as the median published / (single-GPU forecast x GPUs)."""
    single = [r for r in rows if r.num_gpus == 1 and gpus.get_gpu(r.gpu).peak_flops(r.precision) is not None]
    names = [n for n in FREE if n in variant or n.startswith("eff_") or n in ("memory_efficiency",
                                                                                  "depthwise_efficiency")]
    names = [n for n in names if n != "eff_tf32" or any(r.tf32 or gpus.get_gpu(r.gpu).tf32_supported
                                                        for r in single)]
    x = {n: FREE[n][2] for n in FREE}

    def loss(values: dict[str, float]) -> float:
        return sum(e * e for e in log_errors(single, factors_json(values, variant), tables))

    best = loss(x)
    for sweep in range(sweeps):
        for n in names:
            lo, hi, _ = FREE[n]
            centre = x[n]
            span = 4.0 / (2 ** sweep)   # factor range searched around the current value, narrowing
            if lo == 0.0:
                grid = np.unique(np.clip(np.concatenate([[0.0], centre + np.linspace(-1, 1, 13) * span / 2]), lo, hi))
            else:
                grid = np.unique(np.clip(centre * np.geomspace(1 / span, span, 13), lo, hi))
            for v in grid:
                trial = {**x, n: float(v)}
                err = loss(trial)
                if err < best:
                    best, x = err, trial
    multi = [r for r in rows if r.num_gpus > 1]
    factors = factors_json(x, variant)
    if multi:
        ratios = [r.images_per_s / forecast_row(r, factors, tables) for r in multi]
        x["multi_gpu_efficiency"] = float(statistics.median(ratios))
    return factors_json(x, variant)["gpu"]


def summarise(errors: list[float]) -> dict:
    errs = [abs(e) for e in errors]
    within = sum(e <= math.log(1.5) for e in errs)
    return {"rows": len(errs), "within_1.5x": within, "share_within_1.5x": round(within / len(errs), 3),
            "median_abs_error": round(math.exp(statistics.median(errs)) - 1, 3),
            "max_ratio": round(math.exp(max(errs)), 2)}
