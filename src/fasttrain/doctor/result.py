"""doctor's answer, as one object: the machine, the findings, the recommendation, and the payload `--json` prints
(stable keys). The command renders it (doctor/view.py) or prints its payload; the Python API returns it. Pure."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttrain.core.format import plural
from fasttrain.doctor.checks import worst_status
from fasttrain.doctor.findings import Finding
from fasttrain.hardware.report import HardwareReport
from fasttrain.profiles.recommend import Recommendation


@dataclass(frozen=True)
class DoctorResult:
    report: HardwareReport
    findings: list[Finding]
    recommendation: Recommendation
    profile: str                  # the profile checked: as given, or the best-matching preset and why
    written: Path | None = None   # --write-profile's file

    @property
    def status(self) -> str:
        """The worst finding: "ok", "warn" or "fail" (doctor exits 1 on "fail")."""
        return worst_status(self.findings)

    @property
    def verdict(self) -> str:
        """doctor's answer in one line, the first it prints: whether to train here as planned, and why not."""
        fails, warns = (sum(f.status == s for f in self.findings) for s in ("fail", "warn"))
        if fails:  # a failure: training as planned would break or waste the machine (findings.py)
            more = f", {plural(warns, 'warning')}" if warns else ""
            return f"not ready: {fails} failed{more}; fix what failed before training"
        if warns:
            return f"ready to train, with {plural(warns, 'warning')}"
        return f"ready to train: all {plural(len(self.findings), 'check')} ok"

    def to_dict(self) -> dict[str, Any]:
        return {
            "report": self.report.model_dump(mode="json"),
            "findings": [f.to_dict() for f in self.findings],
            "recommendation": self.recommendation.to_dict(),
            "profile": self.profile,
            "status": self.status,
            "written_profile": str(self.written) if self.written else None,
        }
