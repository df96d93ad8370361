"""Which shipped preset fits a machine: best_preset(), what `train` uses when --profile is omitted (and what
recommend.py starts from). Pure: a report in, a preset name out. GPUs match by the token naming the chip first
('t4', 'v100', 'a10g'), then by memory, then by bf16; a machine without a usable CUDA GPU gets "cpu"."""
from __future__ import annotations

import math
import re
from functools import lru_cache

from fasttrain.hardware.report import GpuInfo, HardwareReport
from fasttrain.profiles import presets
from fasttrain.profiles.files import preset_names
from fasttrain.profiles.schema import HardwareSpec

CPU_PRESET = "cpu"


def name_tokens(name: str) -> set[str]:
    """'Tesla V100-SXM2-32GB' -> {'tesla', 'v100', 'sxm2', '32gb'}; parenthesised notes are dropped."""
    name = re.sub(r"\(.*?\)", " ", name.lower())
    return {t for t in re.split(r"[^a-z0-9]+", name) if t}


def model_token(name: str) -> str | None:
    """The token that names the chip: the first one with a digit ('t4', 'v100', 'a10g', '4060')."""
    for token in re.split(r"[^a-z0-9]+", re.sub(r"\(.*?\)", " ", name.lower())):
        if any(c.isdigit() for c in token):
            return token
    return None


@lru_cache(maxsize=1)
def _gpu_presets() -> tuple[tuple[str, HardwareSpec], ...]:
    """(name, hardware) of every shipped preset that targets a GPU, in name order (ties resolve by it)."""
    out = []
    for name in preset_names():
        hw = presets.resolve_file_only(name).profile.hardware
        if hw.gpu:
            out.append((name, hw))
    return tuple(out)


def _distance(gpu: GpuInfo, hw: HardwareSpec) -> float:
    """How far a preset's machine is from this GPU: name first, then VRAM (log ratio), then bf16."""
    vram_gib = gpu.memory_total_bytes / 2**30
    score = abs(math.log(max(vram_gib, 0.1) / (hw.vram_gb or 1.0)))
    token = model_token(hw.gpu or "")
    if token is None or token not in name_tokens(gpu.name):
        score += 10.0
    if gpu.bf16_supported is not None and gpu.bf16_supported != hw.supports_bf16:
        score += 0.5
    return score


def best_preset(report: HardwareReport) -> str:
    """The shipped preset whose machine best matches this one; "cpu" when no CUDA GPU is usable."""
    gpu = report.training_gpu()
    candidates = _gpu_presets()
    if gpu is None or not candidates:
        return CPU_PRESET
    return min(candidates, key=lambda item: _distance(gpu, item[1]))[0]
