"""`doctor`'s rules in the order they are shown: (HardwareReport, Profile?, images/s target?) -> findings.

The rules themselves are pure functions in gpu.py (torch and the GPUs) and host.py
(shm, RAM, workers, precision, compile, disks, environment); a Finding and its Context are in findings.py.

The throughput the data disk must feed comes from, in order: the caller (a forecast from `estimate`,
or `--target-images-per-s`), else the published ResNet-50 AMP training rate of the GPU in
data/feed_targets.csv (NVIDIA's real-ImageNet numbers: what a good pipeline feeds on that GPU),
else there is no target and the data-disk rule only reports the measured speed.
"""
from __future__ import annotations

import contextlib
import csv
import functools
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from fasttrain.doctor import gpu as g
from fasttrain.doctor import host as h
from fasttrain.doctor.findings import Context, Finding
from fasttrain.doctor.session import rule_session_limit
from fasttrain.hardware.report import HardwareReport
from fasttrain.profiles.schema import Profile

Rule = Callable[[Context], "Finding | None"]

RULES: tuple[Rule, ...] = (
    g.rule_torch_installed,
    g.rule_no_gpu,
    g.rule_torch_cuda,
    g.rule_torch_arch,
    g.rule_gpu_busy,
    g.rule_throttling,
    g.rule_pcie,
    h.rule_profile_machine,
    h.rule_bf16,
    h.rule_compile,
    h.rule_busy_cpu,
    h.rule_workers_vs_cores,
    h.rule_loader_ram,
    h.rule_shm,
    h.rule_data_disk,
    h.rule_input_path,
    h.rule_disk_free,
    h.rule_env,
    rule_session_limit,
)


@functools.lru_cache(maxsize=1)
def _feed_targets() -> tuple[tuple[str, float, str], ...]:
    with (resources.files("fasttrain") / "data" / "feed_targets.csv").open(encoding="utf-8") as fh:
        return tuple((r["gpu"], float(r["images_per_sec"]), f"{r['model']} {r['precision']}")
                     for r in csv.DictReader(fh))


def published_images_per_s(gpu_name: str) -> tuple[float, str] | None:
    """The published training rate for this GPU (via gpus.find_gpu), or None when the file has no row for it."""
    from fasttrain.hardware.gpus import find_gpu
    spec = find_gpu(gpu_name)
    if spec is None:
        return None
    for name, rate, what in _feed_targets():
        if name == spec.name:
            return rate, f"published {what} training rate of a {name}, data/feed_targets.csv"
    return None


def feed_target(report: HardwareReport, profile: Profile | None, given: float | None,
                given_source: str = "--target-images-per-s") -> tuple[float | None, str]:
    """(images/s the data disk must feed, where that number comes from)."""
    if given:
        return given, given_source
    names = [gpu.name for gpu in report.gpus if report.has_cuda]
    if profile is not None and profile.hardware.gpu:
        names.append(profile.hardware.gpu)
    for name in names:
        hit = published_images_per_s(name)
        if hit:
            return hit
    return None, ""


def data_facts(data: Path, profile: Profile | None = None, report: HardwareReport | None = None) -> dict[str, object]:
    """What the rules need to know of --data: a prepared set's image count and bytes per image (its shards are
    files of many images), the factor `bench loader` measured for prepared shards on this data (gather), and for
    an image folder whether train would decode it once into RAM here (datasets/decoded.would_decode)."""
    from fasttrain.datasets.measured import find_path_gains, gain_sentence
    from fasttrain.datasets.shards import is_prepared, load_manifest

    facts: dict[str, object] = {"prepared": False, "path": str(data)}
    if is_prepared(data):
        manifest = load_manifest(data)
        shards = [s["name"] for split in ("train", "val") for s in manifest["splits"][split]["shards"]]
        size = sum((data / n).stat().st_size for n in shards if (data / n).is_file())
        images = sum(int(manifest["splits"][split]["count"]) for split in ("train", "val"))
        facts.update(prepared=True, images=images, shards=len(shards), image_bytes=size / max(1, images))
    elif profile is not None and report is not None:
        from fasttrain.core.errors import UserError
        from fasttrain.datasets.decoded import would_decode
        # not an image folder train could read: its own findings and train say why
        with contextlib.suppress(UserError):
            facts["decoded_once"], facts["decoding"] = would_decode(data, profile, report)
    facts["gain"] = gain_sentence(find_path_gains(data), data)
    return facts


def run_rules(report: HardwareReport, profile: Profile | None = None, target_images_per_s: float | None = None,
              profile_label: str = "", target_source: str = "", data: dict[str, object] | None = None) -> list[Finding]:
    """Every rule that applies, in RULES order."""
    target, source = feed_target(report, profile, target_images_per_s, target_source or "--target-images-per-s")
    ctx = Context(report, profile, profile_label, target, source, data)
    return [f for f in (rule(ctx) for rule in RULES) if f is not None]


def worst_status(findings: list[Finding]) -> str:
    statuses = {f.status for f in findings}
    return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "ok"
