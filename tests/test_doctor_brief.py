"""`doctor` on one 80x24 screen (issue 43 item 6): it leads with the verdict and the findings that are not ok, each
with its fix, then counts what is ok; `--all` shows the hardware, the software, every finding and the recommended
settings as before; `--json` is unchanged. Every recorded report of tests/fixtures/reports is judged."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES

REPORTS = sorted((FIXTURES / "reports").glob("*.json"))
SCREEN_LINES = 24


def _flat(text: str) -> str:
    """Words only: a title wrapped over two lines (or inside a panel's borders) still reads as one."""
    return " ".join(text.replace("│", " ").split())


def _findings(cli, report: Path) -> list[dict[str, str]]:
    res = cli("doctor", "--report-from", str(report), "--json")
    assert res.code in (0, 1), res.err
    return json.loads(res.out)["findings"]


@pytest.mark.parametrize("report", REPORTS, ids=[r.stem for r in REPORTS])
def test_doctor_leads_with_the_verdict_and_shows_every_finding_that_is_not_ok(cli, report: Path) -> None:
    findings = _findings(cli, report)
    bad = [f for f in findings if f["status"] != "ok"]
    failed = sum(f["status"] == "fail" for f in bad)
    res = cli("doctor", "--report-from", str(report))
    assert res.code == (1 if failed else 0), res.err
    assert res.out.splitlines()[0].startswith("verdict: " + ("not ready" if failed else "ready")), res.out[:300]
    flat = _flat(res.out)
    for f in bad:
        assert _flat(f["title"]) in flat, f["title"]
        assert _flat(f["fix"]) in flat, f["fix"]
    if failed and "WARN" in flat:  # the failures first
        assert flat.index("FAIL") < flat.index("WARN")
    oks = [f for f in findings if f["status"] == "ok"]
    assert f"{len(oks)} ok (all of it: fasttrain doctor --all)" in flat
    assert not [f for f in oks if f"ok {_flat(f['title'])}" in flat]  # counted, not listed
    assert "hardware" not in flat.split()[:40]  # no panels


def _screen(report: Path) -> list[str]:
    """The default output as a terminal of 80 columns shows it (Rich wraps at the width there, between words)."""
    import io

    from rich.console import Console

    import fasttrain
    from fasttrain.doctor.view import render_brief
    out = io.StringIO()
    render_brief(fasttrain.doctor(report_from=str(report)).result,
                 Console(file=out, width=80, force_terminal=False, soft_wrap=False, highlight=False))
    return [line.rstrip() for line in out.getvalue().splitlines()]


@pytest.mark.parametrize("report", REPORTS, ids=[r.stem for r in REPORTS])
def test_doctor_fits_an_80x24_screen_when_a_couple_of_findings_are_not_ok(cli, report: Path) -> None:
    bad = [f for f in _findings(cli, report) if f["status"] != "ok"]
    lines = _screen(report)
    assert all(len(line) <= 80 for line in lines)
    if len(bad) <= 2:
        assert len(lines) <= SCREEN_LINES, "\n".join(lines)
    for f in bad:  # wrapped between words: each title still reads whole
        assert _flat(f["title"]) in _flat("\n".join(lines))


def test_doctor_in_a_real_80x24_terminal_shows_all_of_it_on_one_screen() -> None:
    pytest.importorskip("pyte", reason="pyte (dev extra) emulates the terminal")
    from pty_helpers import run_in_pty
    term = run_in_pty("doctor", "--report-from", str(FIXTURES / "reports" / "cpu_only.json"))
    assert term.code == 0, term.text()
    assert len(term.lines) <= SCREEN_LINES and term.lines[0].startswith("verdict: ready to train, with 2 warnings")
    assert "fix: --set speed.precision=fp32" in term.text() and "…" not in term.text()


@pytest.mark.parametrize(
    "report",
    [FIXTURES / "reports" / n for n in ("a10g.json", "old_driver.json", "cpu_only.json")],
    ids=["all-ok", "failing", "cpu"],
)
def test_doctor_all_shows_everything(cli, monkeypatch, report: Path) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    findings = _findings(cli, report)
    res = cli("doctor", "--report-from", str(report), "--all")
    flat = _flat(res.out)
    for f in findings:
        assert _flat(f["title"]) in flat, f["title"]
    for part in ("hardware", "software", "recommendation", "loader.batch_size", "speed.precision"):
        assert part in flat, part
    assert len(res.out.splitlines()) > SCREEN_LINES


def test_doctor_json_is_the_same_with_or_without_all(cli) -> None:
    report = str(FIXTURES / "reports" / "old_driver.json")
    plain = cli("doctor", "--report-from", report, "--json")
    everything = cli("doctor", "--report-from", report, "--json", "--all")
    assert plain.code == everything.code == 1
    assert json.loads(plain.out) == json.loads(everything.out)
    assert set(json.loads(plain.out)) == {
        "report",
        "findings",
        "recommendation",
        "profile",
        "status",
        "written_profile",
    }
