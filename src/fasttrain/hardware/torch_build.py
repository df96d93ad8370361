"""The torch build, found without importing torch in this process.

`import torch` costs ~2.5 s, most of the doctor's 3 s budget. So:
- static_info() reads torch/version.py (written when the wheel was built: version, CUDA, HIP) and the
  versions of the nvidia-cudnn / nvidia-nccl wheels it loads. Milliseconds. Where there is no NVIDIA
  device node and NVML sees no GPU, CUDA cannot be available, and this is the whole answer.
- start_child() / finish_child() run `python -m fasttrain.hardware.torch_child` (which imports torch) in a child
  process while the other probes run, when a GPU is present: device count, compute capability, cuDNN
  as loaded. A crash or hang there is reported as import_error, never raised.
compile_support() says whether torch.compile can work, without compiling anything.
"""
from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from fasttrain.hardware.report import TorchDevice, TorchInfo

CHILD_TIMEOUT_S = 60.0  # CUDA initialisation on an 8-GPU machine can take tens of seconds


def _dist_version(prefix: str) -> str | None:
    """Version of the installed distribution named `prefix` (e.g. nvidia-cudnn-cu13), or one starting with it."""
    exact = _safe_version(prefix)
    if exact:
        return exact
    for dist in md.distributions():
        name = str((dist.metadata.get_all("Name") or [""])[0]).lower().replace("_", "-")
        if name.startswith(prefix):
            return dist.version
    return None


def cudnn_int(version: str | None) -> int | None:
    """'9.24.0.43' -> 92400, the integer torch.backends.cudnn.version() returns for cuDNN 9."""
    if not version:
        return None
    parts = [int(p) for p in re.findall(r"\d+", version)[:3]] + [0, 0, 0]
    major, minor, patch = parts[:3]
    return major * 10000 + minor * 100 + patch if major >= 9 else major * 1000 + minor * 100 + patch


def read_version_file(torch_dir: Path) -> dict[str, object]:
    """The literal assignments of torch/version.py (`__version__`, `cuda`, `hip`), parsed, not executed."""
    try:
        tree = ast.parse((torch_dir / "version.py").read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return {}
    out: dict[str, object] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and value is not None:
            try:
                out[target.id] = ast.literal_eval(value)
            except ValueError:
                continue
    return out


def compilers() -> tuple[str | None, str | None]:
    """(C compiler, C++ compiler) on PATH, honouring $CC / $CXX like the build tools do."""
    def first(env: str, names: tuple[str, ...]) -> str | None:
        for name in ((os.environ.get(env, ""),) if os.environ.get(env) else ()) + names:
            found = shutil.which(name)
            if found:
                return found
        return None
    return first("CC", ("cc", "gcc", "clang")), first("CXX", ("c++", "g++", "clang++"))


def _major_minor(version: str | None) -> tuple[int, int]:
    nums = [int(n) for n in re.findall(r"\d+", version or "")[:2]] + [0, 0]
    return nums[0], nums[1]


def compile_support(info: TorchInfo, python_version: tuple[int, int], platform: str,
                    min_capability: float | None) -> tuple[bool, str]:
    """Whether torch.compile (inductor) can work for the device training will use, and why not."""
    if not info.installed or not info.version:
        return False, "torch is not installed"
    if _major_minor(info.version) < (2, 0):
        return False, f"torch {info.version} has no torch.compile (needs 2.0 or newer)"
    if platform.startswith("win") and _major_minor(info.version) < (2, 6):
        return False, "inductor needs Linux or macOS before torch 2.6"
    if info.cuda_available:
        if not info.triton_version:
            return False, "triton is not installed: inductor generates its GPU kernels with it"
        if not info.c_compiler:
            return False, "no C compiler (cc/gcc/clang) on PATH: triton builds its kernel launchers with one"
        if min_capability is not None and min_capability < 7.0:
            return False, f"triton needs compute capability 7.0 or newer; this GPU is {min_capability:g}"
        return True, f"triton {info.triton_version} and {Path(info.c_compiler).name} found"
    if not info.cxx_compiler:
        return False, "no C++ compiler (g++/clang++) on PATH: inductor's CPU backend compiles C++"
    return True, f"CPU backend: {Path(info.cxx_compiler).name} found"


def static_info() -> TorchInfo:
    """Everything knowable about the torch build without importing it."""
    cc, cxx = compilers()
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return TorchInfo(installed=False, cpu_only_build=True, c_compiler=cc, cxx_compiler=cxx, probe_method="static")
    fields = read_version_file(Path(spec.origin).parent)
    cuda, hip = (v if isinstance(v := fields.get(k), str) else None for k in ("cuda", "hip"))
    version = fields.get("__version__") or _safe_version("torch")
    triton = _safe_version("triton") if importlib.util.find_spec("triton") else None
    cuda_major = (cuda or "").split(".")[0]
    return TorchInfo(
        installed=True, version=str(version) if version else None, cuda_version=cuda or hip,
        cudnn_version=cudnn_int(_dist_version(f"nvidia-cudnn-cu{cuda_major}")) if cuda else None,
        cpu_only_build=cuda is None and hip is None,
        nccl_version=_dist_version(f"nvidia-nccl-cu{cuda_major}") if cuda else None,
        triton_version=triton, c_compiler=cc, cxx_compiler=cxx, probe_method="static",
    )


def _safe_version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def start_child() -> subprocess.Popen[str]:
    """Begin `import torch` in a child process; collect it with finish_child()."""
    return subprocess.Popen([sys.executable, "-m", "fasttrain.hardware.torch_child"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})


def finish_child(child: subprocess.Popen[str], timeout: float = CHILD_TIMEOUT_S) -> tuple[dict | None, str | None]:
    """(what the child saw, None) or (None, why it gave nothing)."""
    try:
        out, err = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        return None, f"`import torch` did not finish in {timeout:g} s (a hung CUDA initialisation?)"
    if child.returncode != 0:
        lines = [ln for ln in (err or "").strip().splitlines() if ln.strip()]
        last = lines[-1] if lines else f"exit status {child.returncode}"
        return None, f"`import torch` failed: {last}"
    try:
        return json.loads(out.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        return None, "`import torch` printed no report"


def merge_child(info: TorchInfo, seen: dict | None, error: str | None) -> TorchInfo:
    """Static info, corrected by what the imported torch saw (it wins where both know)."""
    if seen is None:
        return info.model_copy(update={"import_error": error, "probe_method": "static"})
    return info.model_copy(update={
        "version": seen.get("version") or info.version,
        "cuda_version": seen.get("cuda_version") or seen.get("hip_version") or info.cuda_version,
        "cudnn_version": seen.get("cudnn_version") or info.cudnn_version,
        "cuda_available": bool(seen.get("cuda_available")),
        "device_count": int(seen.get("device_count") or 0),
        "nccl_version": seen.get("nccl_version") or info.nccl_version,
        "arch_list": seen.get("arch_list"),
        "devices": [TorchDevice.model_validate(d) for d in seen.get("devices") or [] if isinstance(d, dict)],
        "current_device": int(seen.get("current_device") or 0),
        "probe_method": "import",
        "import_error": "; ".join(seen.get("errors") or []) or None,
    })
