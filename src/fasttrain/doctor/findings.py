"""Findings: what a doctor rule says, and the context every rule reads.

A Finding is ok / warn / fail with the numbers in `detail` and the knob to turn in `fix`.
`fail` means training as planned will break or waste the machine (`doctor` exits 1 on any).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

from fasttrain.hardware.report import GpuInfo, HardwareReport
from fasttrain.profiles.schema import Profile

Status = Literal["ok", "warn", "fail"]

OTHER_PROCESS_MIB = 256  # a process holding less than this on a GPU is a display server or a monitor
USED_MEMORY_WARN_GIB = 1.0  # used VRAM above this with nobody listed: another container is using the GPU
FREE_MEMORY_FAIL_FRACTION = 0.5  # presets size their batch for the whole GPU: with less than half free, OOM
BUSY_UTILIZATION_PCT = 20  # someone else is computing on it right now
CLOCK_LOW_FRACTION = 0.8  # SM clock under 80% of its maximum while power-capped: really slowed, not just at TDP
SHM_WARN_FRACTION = 0.5  # over half of /dev/shm for the loader leaves no room for anyone else
DISK_FREE_WARN_GIB = 5  # checkpoints of a ResNet-50 run with optimizer state are ~300 MB each
HARD_SLOWDOWNS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


@dataclass(frozen=True)
class Finding:
    id: str
    status: Status
    title: str
    detail: str = ""
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Context:
    """What the rules look at. profile: the one `train` would run (given, or the best-matching preset)."""

    report: HardwareReport
    profile: Profile | None = None
    profile_label: str = ""
    target_images_per_s: float | None = None
    target_source: str = ""
    # --data facts (checks.data_facts): prepared, images, image_bytes, shards, gain (the measured factor sentence)
    data: dict[str, Any] | None = None


    @property
    def workers(self) -> int:
        """DataLoader workers on this machine: per process x processes per node."""
        if self.profile is None:
            return 0
        return self.profile.loader.num_workers * self.profile.world.gpus_per_node



def gpu_label(g: GpuInfo) -> str:
    return f"GPU {g.index} ({g.name})"


def rank(status: Status) -> int:
    return {"ok": 0, "warn": 1, "fail": 2}[status]


def worse(a: Finding | None, b: Finding) -> Finding:
    """The more severe of two findings (the first on a tie)."""
    return b if a is None or rank(b.status) > rank(a.status) else a


