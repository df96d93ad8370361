"""Doctor rules about torch and the GPUs: present, usable by torch, busy, throttled, PCIe link.

Pure: each takes a findings.Context and returns a Finding, or None when it does not apply here.
"""
from __future__ import annotations

from fasttrain.core import arithmetic as ar
from fasttrain.core.format import fmt_bytes
from fasttrain.doctor.findings import (
    BUSY_UTILIZATION_PCT,
    CLOCK_LOW_FRACTION,
    FREE_MEMORY_FAIL_FRACTION,
    HARD_SLOWDOWNS,
    OTHER_PROCESS_MIB,
    USED_MEMORY_WARN_GIB,
    Context,
    Finding,
    Status,
    gpu_label,
    worse,
)
from fasttrain.hardware.arch import arch_mismatches

# ---- torch and the GPU -------------------------------------------------------------------------------------

def rule_torch_installed(c: Context) -> Finding:
    t = c.report.torch
    if not t.installed:
        return Finding("torch", "fail", "torch is not installed", "fasttrain trains with PyTorch.",
                       "pip install torch torchvision (pytorch.org/get-started picks the build for your CUDA)")
    if t.import_error and t.probe_method != "import":
        return Finding("torch", "fail", f"torch {t.version} is installed but does not import", t.import_error,
                       "reinstall torch in this environment; run `python -c 'import torch'` to see the full error")
    build = f"CUDA {t.cuda_version}" if not t.cpu_only_build else "CPU-only build"
    return Finding(
        "torch",
        "ok",
        f"torch {t.version} ({build})",
        f"cuDNN {cudnn_text(t.cudnn_version)}, NCCL {t.nccl_version or '-'}, found by {t.probe_method or 'probe'}",
    )


def rule_no_gpu(c: Context) -> Finding:
    r, p = c.report, c.profile
    if r.has_cuda:
        names = ", ".join(sorted({g.name for g in r.gpus})) or "CUDA device"
        return Finding("gpu", "ok", f"{r.torch.device_count} CUDA GPU(s) usable by torch: {names}")
    if r.gpus:  # present but not usable: rule_torch_cuda explains why
        return Finding(
            "gpu",
            "fail",
            "training would run on the CPU although an NVIDIA GPU is present",
            "see the CUDA finding below",
            "fix the torch/driver problem below",
        )
    fast = r.torch.cpu_bf16_fast
    has = "unknown" if fast is None else ("yes" if fast else "no")
    detail = (
        "no NVIDIA GPU found: training runs on the CPU with AMP off (fp16 autocast and GradScaler are "
        f"GPU-only): fp32, or bf16 autocast where the CPU has AVX512-BF16/AMX (this one: {has}); "
        f"a large slow-down: the Kaggle note measured 12x for GPU over CPU. {r.nvml_error or ''}"
    ).strip()
    if p is not None and p.hardware.gpu:
        return Finding(
            "gpu",
            "fail",
            f"profile {c.profile_label or p.name} is for a GPU ({p.hardware.gpu}); this machine has none",
            detail,
            "use --profile cpu here, or run on the machine the profile is for",
        )
    return Finding(
        "gpu",
        "warn",
        "no GPU: training on the CPU",
        detail,
        "fine for small images and smoke tests (--profile cpu); for real runs use a GPU machine",
    )


def rule_torch_cuda(c: Context) -> Finding | None:
    """An NVIDIA GPU is present: can this torch use it?"""
    r = c.report
    if not r.gpus:
        return None
    t = r.torch
    if r.has_cuda:
        hidden = [g for g in r.gpus if g.visible_to_torch is False]
        if hidden:
            return Finding(
                "torch-cuda",
                "warn",
                f"torch sees {t.device_count} of {len(r.gpus)} GPUs",
                f"CUDA_VISIBLE_DEVICES={r.env.get('CUDA_VISIBLE_DEVICES', '(unset)')}",
                "unset CUDA_VISIBLE_DEVICES to use them all",
            )
        return Finding(
            "torch-cuda",
            "ok",
            f"torch CUDA {t.cuda_version} runs on driver {r.driver_version} "
            f"(supports CUDA up to {r.cuda_driver_version})",
        )
    driver = f"driver {r.driver_version or '?'} supports CUDA up to {r.cuda_driver_version or '?'}"
    if t.cpu_only_build:
        return Finding(
            "torch-cuda",
            "fail",
            "NVIDIA GPU present but torch is a CPU-only build",
            f"torch {t.version} was built without CUDA; {driver}.",
            f"pip install --force-reinstall torch torchvision --index-url "
            f"https://download.pytorch.org/whl/cuXYZ with CUDA XY.Z <= {r.cuda_driver_version or 'the driver'}",
        )
    visible = r.env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1", "none", "NoDevFiles"):
        return Finding(
            "torch-cuda",
            "fail",
            "CUDA_VISIBLE_DEVICES hides every GPU from torch",
            f"CUDA_VISIBLE_DEVICES={visible!r}",
            "unset CUDA_VISIBLE_DEVICES or set it to 0",
        )
    if _version_tuple(t.cuda_version) > _version_tuple(r.cuda_driver_version):
        return Finding(
            "torch-cuda",
            "fail",
            "the NVIDIA driver is too old for this torch build",
            f"torch {t.version} needs CUDA {t.cuda_version}; {driver}.",
            f"update the NVIDIA driver, or install a torch built for CUDA <= {r.cuda_driver_version}",
        )
    return Finding(
        "torch-cuda",
        "fail",
        "torch cannot use the NVIDIA GPU",
        f"torch {t.version} (CUDA {t.cuda_version}); {driver}. {t.import_error or ''}".strip(),
        "run `python -c 'import torch; torch.cuda.init()'` for the error; reboot after a driver update",
    )


def rule_torch_arch(c: Context) -> Finding | None:
    """torch sees the GPU, but has its build kernels for it? (hardware/arch.py; the plan refuses for the same
    reason.) None where the build's architecture list is unknown or there is no CUDA GPU."""
    r = c.report
    if not r.has_cuda or not r.torch.arch_list:
        return None
    wrong = arch_mismatches(r)
    if not wrong:
        return Finding("torch-arch", "ok", f"torch has kernels for every GPU here ({' '.join(r.torch.arch_list)})")
    first = wrong[0]
    others = f" (and {len(wrong) - 1} more GPU(s) alike)" if len(wrong) > 1 else ""
    return Finding(
        "torch-arch", "fail", f"this torch build cannot run on the {first.gpu}{others}", first.reason, first.fix
    )


def cudnn_text(v: int | None) -> str:
    """torch's integer cuDNN version as people write it: 92400 -> '9.24.0', 8902 -> '8.9.2'."""
    if not v:
        return "-"
    if v >= 90000:
        return f"{v // 10000}.{v // 100 % 100}.{v % 100}"
    return f"{v // 1000}.{v // 100 % 10}.{v % 100}"


def _version_tuple(v: str | None) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in (v or "0").split("+")[0].split(".")[:2])
    except ValueError:
        return (0,)


def rule_gpu_busy(c: Context) -> Finding | None:
    """Memory held and compute used by other processes before we start."""
    gpus = c.report.gpus
    if not gpus:
        return None
    worst: Finding | None = None
    for g in gpus:
        others = [p for p in g.processes if (p.used_bytes or 0) >= OTHER_PROCESS_MIB * ar.MIB]
        used = g.memory_used_bytes or 0
        free = g.memory_free_bytes if g.memory_free_bytes is not None else g.memory_total_bytes - used
        if not others and used < USED_MEMORY_WARN_GIB * ar.GIB and (g.utilization_pct or 0) < BUSY_UTILIZATION_PCT:
            continue
        who = (
            ", ".join(f"pid {p.pid} {p.name or '?'} {fmt_bytes(p.used_bytes)}" for p in others)
            or "no process listed (another container?)"
        )
        detail = (
            f"{gpu_label(g)}: {fmt_bytes(used)} of {fmt_bytes(g.memory_total_bytes)} already used, "
            f"{fmt_bytes(free)} free, "
            f"utilisation {g.utilization_pct if g.utilization_pct is not None else '?'}%; held by: {who}"
        )
        status: Status = "fail" if free < FREE_MEMORY_FAIL_FRACTION * g.memory_total_bytes else "warn"
        fix = (
            "stop those processes (nvidia-smi shows them) or pick another GPU with CUDA_VISIBLE_DEVICES; "
            "else lower loader.batch_size to fit the free memory. If it is your own training run, "
            "doctor is seeing it: run doctor before training to judge the idle GPU"
        )
        worst = worse(worst, Finding("gpu-busy", status, "GPU memory already in use by other processes", detail, fix))
    return worst or Finding("gpu-busy", "ok", "GPU memory free: no other processes on the GPU(s)")


def rule_throttling(c: Context) -> Finding | None:
    if not c.report.gpus:
        return None
    worst: Finding | None = None
    for g in c.report.gpus:
        reasons = [r for r in g.throttle_reasons if r not in ("gpu_idle", "applications_clocks_setting")]
        if not reasons:
            continue
        clocks = (
            f"SM clock {g.sm_clock_mhz} of {g.sm_clock_max_mhz} MHz"
            if g.sm_clock_mhz and g.sm_clock_max_mhz
            else "clocks unknown"
        )
        ratio = g.sm_clock_mhz / g.sm_clock_max_mhz if g.sm_clock_mhz and g.sm_clock_max_mhz else None
        detail = (
            f"{gpu_label(g)}: {', '.join(reasons)}; {clocks}; temperature {g.temperature_c}C; "
            f"power {g.power_draw_w} of {g.power_limit_w} W"
        )
        thermal = [r for r in reasons if "thermal" in r or r in HARD_SLOWDOWNS]
        if thermal:
            status: Status = "fail" if any(r in HARD_SLOWDOWNS for r in reasons) else "warn"
            fix = (
                "cool the GPU: check fans and airflow, clean dust, raise the laptop; "
                "cap power (nvidia-smi -pl) to keep it under its slowdown temperature"
            )
        elif ratio is not None and ratio < CLOCK_LOW_FRACTION:
            status, fix = (
                "warn",
                "the GPU hits its power limit: check `nvidia-smi -q -d POWER`; on a laptop plug in AC power",
            )
        else:
            status, fix = "ok", ""
            detail += " (at the power limit under load, clocks near maximum: normal)"
        worst = worse(
            worst,
            Finding(
                "throttling",
                status,
                "GPU clocks are being held down" if status != "ok" else "GPU at its power limit, clocks near maximum",
                detail,
                fix,
            ),
        )
    return worst or Finding("throttling", "ok", "no thermal or power throttling")


def rule_pcie(c: Context) -> Finding | None:
    """Width below max is the slot or riser; generation below max only counts under load (idle GPUs downshift)."""
    findings = []
    for g in c.report.gpus:
        if g.pcie_width and g.pcie_width_max and g.pcie_width < g.pcie_width_max:
            findings.append(f"{gpu_label(g)}: link x{g.pcie_width} of x{g.pcie_width_max} (the slot or riser)")
        busy = (g.utilization_pct or 0) >= BUSY_UTILIZATION_PCT and "gpu_idle" not in g.throttle_reasons
        if g.pcie_gen and g.pcie_gen_max and g.pcie_gen < g.pcie_gen_max and busy:
            findings.append(f"{gpu_label(g)}: PCIe gen {g.pcie_gen} of {g.pcie_gen_max} under load")
    known = [g for g in c.report.gpus if g.pcie_width_max]
    if not known:
        return None
    if not findings:
        g = known[0]
        return Finding(
            "pcie",
            "ok",
            f"PCIe link gen {g.pcie_gen}/{g.pcie_gen_max} x{g.pcie_width}/{g.pcie_width_max}",
            "an idle GPU lowers its link generation to save power; that is not a fault",
        )
    return Finding(
        "pcie",
        "warn",
        "PCIe link below its maximum",
        "; ".join(findings)
        + ". Host-to-GPU copies slow down; it matters when batches are large or data is copied each step",
        "move the GPU to a full x16 slot (check the BIOS PCIe setting and the riser); keep "
        "loader.pin_memory on so copies overlap compute",
    )
