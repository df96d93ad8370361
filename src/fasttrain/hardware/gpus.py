"""GPU spec lookup. The numbers live in data/gpus.csv (published specs, each row with its source).

Empty cells are unknown and stay None: a forecast for a GPU without a peak says so instead of guessing.
No torch import: the doctor and `profiles` may read this cheaply.
Units: memory GB (10**9 bytes as vendors print it), bandwidth GB/s, peaks TFLOP/s dense (no sparsity).
"""
from __future__ import annotations

import csv
import functools
import re
from dataclasses import dataclass, replace
from importlib import resources

from fasttrain.core.errors import Problem, UserError
from fasttrain.core.suggest import close_matches


@dataclass(frozen=True)
class GpuSpec:
    name: str
    aliases: tuple[str, ...]
    memory_gb: float | None
    bandwidth_gbps: float | None
    fp16_tensor_tflops: float | None
    bf16_supported: bool
    compute_capability: str | None
    fp32_tflops: float | None
    tf32_tflops: float | None
    source: str

    @property
    def memory_bytes(self) -> int | None:
        return None if self.memory_gb is None else int(self.memory_gb * 1e9)

    @property
    def bandwidth_bytes_per_s(self) -> float | None:
        return None if self.bandwidth_gbps is None else self.bandwidth_gbps * 1e9

    @property
    def bf16_tensor_tflops(self) -> float | None:
        """Ampere and newer run bf16 at the fp16 tensor rate; older GPUs have no bf16 tensor cores."""
        return self.fp16_tensor_tflops if self.bf16_supported else None

    @property
    def tf32_supported(self) -> bool:
        return self.compute_capability is not None and float(self.compute_capability) >= 8.0

    def peak_flops(self, precision: str, tf32: bool = False) -> float | None:
        """Dense peak FLOP/s for the matmuls/convs of a plan's precision; None when the spec file does not know."""
        if precision == "fp16-mixed":
            tflops = self.fp16_tensor_tflops
        elif precision == "bf16-mixed":
            tflops = self.bf16_tensor_tflops
        elif tf32 and self.tf32_supported:
            tflops = self.tf32_tflops
        else:
            tflops = self.fp32_tflops
        return None if tflops is None else tflops * 1e12

    def peak_field(self, precision: str, tf32: bool = False) -> str:
        """The spec-file column a peak comes from, for messages about unknown values."""
        if precision == "fp16-mixed":
            return "fp16_tensor_tflops_dense"
        if precision == "bf16-mixed":
            return "fp16_tensor_tflops_dense (bf16)" if self.bf16_supported else "bf16 (not supported)"
        return "tf32_tflops_dense" if tf32 and self.tf32_supported else "fp32_tflops"


def _num(cell: str) -> float | None:
    cell = cell.strip()
    return float(cell) if cell else None


def normalise(name: str) -> str:
    """'NVIDIA GeForce RTX 4060 Laptop GPU' and 'rtx-4060 laptop' both become 'rtx 4060 laptop'."""
    s = name.lower().replace("_", " ").replace("-", " ")
    s = re.sub(r"\b(nvidia|geforce|tesla)\b", " ", s)
    s = re.sub(r"\bgpu\b\s*$", " ", s.strip())
    return re.sub(r"\s+", " ", s).strip()


@functools.lru_cache(maxsize=1)
def load_specs() -> tuple[GpuSpec, ...]:
    path = resources.files("fasttrain") / "data" / "gpus.csv"
    with path.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return tuple(GpuSpec(
        name=r["gpu"], aliases=tuple(a for a in r["aliases"].split(";") if a),
        memory_gb=_num(r["memory_gb"]), bandwidth_gbps=_num(r["bandwidth_gbps"]),
        fp16_tensor_tflops=_num(r["fp16_tensor_tflops_dense"]), bf16_supported=r["bf16_supported"] == "yes",
        compute_capability=r["compute_capability"] or None, fp32_tflops=_num(r["fp32_tflops"]),
        tf32_tflops=_num(r["tf32_tflops_dense"]), source=r["source"]) for r in rows)


@functools.lru_cache(maxsize=1)
def _index() -> dict[str, GpuSpec]:
    index: dict[str, GpuSpec] = {}
    for spec in load_specs():
        for key in (spec.name, *spec.aliases):
            index.setdefault(normalise(key), spec)
    return index


@functools.lru_cache(maxsize=1)
def _standins() -> dict[str, tuple[str, str]]:
    """data/gpu_standins.csv: a GPU whose vendor publishes no peaks -> (the GPU whose peaks price it, why)."""
    path = resources.files("fasttrain") / "data" / "gpu_standins.csv"
    with path.open(encoding="utf-8") as fh:
        return {r["gpu"]: (r["peaks_from"], r["source"]) for r in csv.DictReader(fh)}


def standin_name(name: str) -> str:
    """The GPU whose peaks price `name` (data/gpu_standins.csv), or ""."""
    return _standins().get(name, ("", ""))[0]


def with_standin_peaks(spec: GpuSpec) -> tuple[GpuSpec, str | None]:
    """A GPU without published peaks priced with a named relative's (its own memory and bandwidth kept), and
    the note that says so; the spec unchanged and None when it has its own peaks or no stand-in is listed."""
    own = (spec.fp16_tensor_tflops, spec.fp32_tflops, spec.tf32_tflops)
    standin = _standins().get(spec.name)
    if all(v is not None for v in own) or standin is None:
        return spec, None
    other = find_gpu(standin[0])
    if other is None:
        return spec, None
    merged = replace(spec, fp16_tensor_tflops=spec.fp16_tensor_tflops or other.fp16_tensor_tflops,
                     fp32_tflops=spec.fp32_tflops or other.fp32_tflops,
                     tf32_tflops=spec.tf32_tflops or other.tf32_tflops)
    return merged, f"peaks of the {other.name} stand in for the {spec.name}'s unpublished ones ({standin[1]})"


def gpu_names() -> list[str]:
    return [s.name for s in load_specs()]


def find_gpu(name: str) -> GpuSpec | None:
    """Exact name, alias, or an NVML name such as 'NVIDIA A100-SXM4-80GB'; None when not in the file."""
    if not name:
        return None
    key = normalise(name)
    index = _index()
    if key in index:
        return index[key]
    # NVML adds memory/board suffixes ('NVIDIA A10G', 'Tesla T4', 'NVIDIA H100 80GB HBM3'): drop words from the end.
    # A memory size is never dropped: 'A100 90GB' must not become 'A100'.
    words = key.split()
    for n in range(len(words) - 1, 0, -1):
        if re.fullmatch(r"\d+g(b|ib)?", words[n]):
            break
        hit = index.get(" ".join(words[:n]))
        if hit is not None:
            return hit
    return None


def get_gpu(name: str, where: str = "--gpu") -> GpuSpec:
    """find_gpu or a UserError with close matches (exit 2)."""
    spec = find_gpu(name)
    if spec is None:
        choices = gpu_names() + [a for s in load_specs() for a in s.aliases]
        hits = close_matches(name, choices)
        fix = (f"did you mean {' or '.join(repr(h) for h in hits)}? " if hits else "") + \
            f"known GPUs: {', '.join(gpu_names())}"
        raise UserError([Problem(where, f"unknown GPU {name!r}", fix)])
    return spec
