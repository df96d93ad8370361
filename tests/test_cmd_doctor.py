"""`fasttrain doctor` through the real entry point: exit codes 0/1/2, --json keys, --report-from, --data,
--write-profile (and that `profiles validate` accepts what it writes; `train --profile FILE` loads it with the
same presets.resolve that test_recommend round-trips, so no 20 s training start-up is spent here)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from fasttrain.hardware.report import HardwareReport

REPORTS = Path(__file__).parent / "fixtures" / "reports"


def fixture(name: str) -> str:
    return str(REPORTS / f"{name}.json")


def test_doctor_on_this_machine_renders_every_panel(cli) -> None:
    res = cli("doctor", "--all")
    assert res.code in (0, 1), res.err
    for title in ("hardware", "software", "findings", "recommendation"):
        assert title in res.out
    assert "\x1b[" not in res.out  # plain text off a terminal
    assert "failed," in res.out and "ok" in res.out


def test_doctor_on_this_machine_leads_with_its_verdict(cli) -> None:
    res = cli("doctor")
    assert res.code in (0, 1), res.err
    assert res.out.startswith("verdict: ") and "\x1b[" not in res.out
    assert "failed," in res.out and "ok (all of it: fasttrain doctor --all)" in res.out


def test_doctor_json_on_this_machine_has_stable_keys(cli) -> None:
    res = cli("doctor", "--json")
    data = json.loads(res.out)
    assert {"report", "findings", "recommendation", "profile", "status"} <= set(data)
    report = HardwareReport.model_validate(data["report"])
    assert report.cpu.logical_cores >= 1 and report.memory.ram_total_bytes > 0
    assert all({"id", "status", "title", "detail", "fix"} == set(f) for f in data["findings"])
    assert {"preset", "settings", "reasons", "changes", "notes"} <= set(data["recommendation"])
    assert res.code == (1 if data["status"] == "fail" else 0)


@pytest.mark.parametrize("name, code, status", [
    ("cpu_only", 0, "warn"), ("a10g", 0, "ok"), ("v100_16", 0, "ok"),
    ("busy_gpu", 1, "fail"), ("throttled_gpu", 1, "fail"), ("container_shm64", 1, "fail"),
    ("gpu_with_cpu_torch", 1, "fail"),
])
def test_report_from_fixture_exit_codes(cli, name: str, code: int, status: str) -> None:
    res = cli("doctor", "--report-from", fixture(name), "--json")
    assert res.code == code, res.err
    assert json.loads(res.out)["status"] == status


def test_report_from_accepts_what_doctor_json_records(cli, tmp_path: Path) -> None:
    """`fasttrain doctor --json > x.json` is the recorder: its output is a valid --report-from input."""
    recorded = tmp_path / "this-machine.json"
    recorded.write_text(cli("doctor", "--json").out)
    res = cli("doctor", "--report-from", str(recorded), "--json")
    assert res.code in (0, 1)
    assert json.loads(res.out)["report"] == json.loads(recorded.read_text())["report"]


def test_profile_option_checks_that_profile(cli) -> None:
    res = cli("doctor", "--report-from", fixture("cpu_only"), "--profile", "aws-a10g")
    assert res.code == 1
    assert "aws-a10g" in res.out and "FAIL" in res.out and "--profile cpu" in res.out


def test_text_output_shows_the_finding_and_its_fix(cli) -> None:
    res = cli("doctor", "--report-from", fixture("container_shm64"))
    assert res.code == 1
    assert "/dev/shm too small" in res.out and "--shm-size" in res.out and "kaggle-t4" in res.out


def test_bad_profile_is_exit_2_with_a_suggestion(cli) -> None:
    res = cli("doctor", "--report-from", fixture("cpu_only"), "--profile", "aws-a10")
    assert res.code == 2
    assert "aws-a10g" in res.err and "Traceback" not in res.err


@pytest.mark.parametrize("content, message", [(None, "no such file"), ("{not json", "not a JSON file"),
                                               ('{"gpus": []}', "memory")])
def test_bad_report_file_is_exit_2(cli, tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    res = cli("doctor", "--report-from", str(path))
    assert res.code == 2 and message in res.err and "--report-from" in res.err


def test_data_option_errors_are_exit_2(cli, tmp_path: Path) -> None:
    assert cli("doctor", "--data", str(tmp_path / "missing")).code == 2
    res = cli("doctor", "--data", str(tmp_path), "--report-from", fixture("a10g"))
    assert res.code == 2 and "--report-from" in res.err


def test_data_option_measures_the_folder(cli, tmp_path: Path) -> None:
    for i in range(20):
        (tmp_path / f"{i}.jpg").write_bytes(b"\xff" * 5000)
    res = cli("doctor", "--data", str(tmp_path), "--target-images-per-s", "1", "--json")
    data = json.loads(res.out)
    disk = next(d for d in data["report"]["disks"] if d["role"] == "data")
    assert disk["sample_files"] == 20 and disk["sample_bytes"] == 100_000
    finding = next(f for f in data["findings"] if f["id"] == "data-disk")
    assert finding["status"] == "ok" and "1 images/s" in finding["detail"]


def test_write_profile_refuses_overwrite_then_force(cli, tmp_path: Path) -> None:
    path = tmp_path / "box.yaml"
    first = cli("doctor", "--report-from", fixture("t4_kaggle"), "--write-profile", str(path))
    assert first.code == 0, first.err
    assert path.exists() and f"written to {path}" in first.out
    again = cli("doctor", "--report-from", fixture("t4_kaggle"), "--write-profile", str(path))
    assert again.code == 2 and "already exists" in again.err and "--force" in again.err
    forced = cli("doctor", "--report-from", fixture("a10g"), "--write-profile", str(path), "--force", "--json")
    assert forced.code == 0 and json.loads(forced.out)["written_profile"] == str(path)
    assert "extends: aws-a10g" in path.read_text()
    assert cli("profiles", "validate", str(path)).code == 0
