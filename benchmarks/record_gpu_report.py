"""Record this machine's `fasttrain doctor --json` report as a fixture for the doctor/plan tests.

    python benchmarks/record_gpu_report.py                      # -> tests/fixtures/reports/<gpu>.json
    python benchmarks/record_gpu_report.py --out /tmp/h100.json

Writes the bare report (the "report" key of `doctor --json`), as the hand-built fixtures in
tests/fixtures/reports/ are, which `fasttrain doctor --report-from FILE` and the tests load. The host name is
replaced (a fixture names a kind of machine, not a host) and the environment overrides are dropped.
Exit 0 written, 2 when this machine has no CUDA GPU that the report lists (one line, no traceback).
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REPORTS = REPO / "tests" / "fixtures" / "reports"


def slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100_80gb_hbm3'."""
    s = re.sub(r"\b(nvidia|geforce|tesla)\b", " ", name.lower())
    return re.sub(r"[^a-z0-9]+", "_", s).strip("_") or "gpu"


def doctor_json() -> dict:
    """`fasttrain doctor --json` in a child process (exit 1 only says a finding failed; the JSON is whole)."""
    proc = subprocess.run([sys.executable, "-m", "fasttrain", "doctor", "--json"], capture_output=True, text=True,
                          timeout=300)
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"record_gpu_report: `fasttrain doctor --json` failed (exit {proc.returncode}): {last}")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="where to write (default: tests/fixtures/reports/<gpu>.json)")
    ap.add_argument("--force", action="store_true", help="replace an existing file")
    args = ap.parse_args(argv)
    try:
        data = doctor_json()
    except SystemExit as exc:
        print(exc, file=sys.stderr)
        return 2
    report = data["report"]
    gpus = report.get("gpus") or []
    if not gpus or not (report.get("torch") or {}).get("cuda_available"):
        print("record_gpu_report: needs a CUDA GPU (the doctor's report lists none that torch can use)",
              file=sys.stderr)
        return 2
    report["hostname"] = f"recorded-{slug(gpus[0]['name'])}"
    report["env"] = {}
    out = args.out or REPORTS / f"{slug(gpus[0]['name'])}.json"
    if out.exists() and not args.force:
        print(f"record_gpu_report: {out} exists; add --force to replace it", file=sys.stderr)
        return 2
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {out} ({gpus[0]['name']}, driver {report.get('driver_version')}, doctor status {data['status']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
