"""Rich panels for `fasttrain doctor`: hardware, software, findings, recommendation. Layout only.

Off a terminal (CI, `| tee`) render.console() prints plain text, so the same panels read as lines.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from fasttrain.core.console import console
from fasttrain.core.format import fmt_bytes, plural
from fasttrain.doctor.findings import Finding
from fasttrain.doctor.gpu import cudnn_text
from fasttrain.doctor.result import DoctorResult
from fasttrain.hardware.report import HardwareReport
from fasttrain.profiles.recommend import Recommendation

STATUS_STYLE = {"ok": ("ok  ", "green"), "warn": ("WARN", "yellow"), "fail": ("FAIL", "bold red")}



def _kv_table() -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column("what", style="cyan", no_wrap=True)
    table.add_column("value", overflow="fold")  # a long path folds onto the next line, never cut to `…`
    return table


def _gpu_line(g: Any) -> str:
    parts = [f"{fmt_bytes(g.memory_used_bytes, '-')} / {fmt_bytes(g.memory_total_bytes, '-')} used"]
    if g.utilization_pct is not None:
        parts.append(f"util {g.utilization_pct:g}%")
    if g.temperature_c is not None:
        parts.append(f"{g.temperature_c:g}C")
    if g.power_draw_w is not None:
        parts.append(f"{g.power_draw_w:.0f}/{g.power_limit_w or 0:.0f} W")
    if g.sm_clock_mhz is not None:
        parts.append(f"SM {g.sm_clock_mhz}/{g.sm_clock_max_mhz} MHz")
    if g.pcie_gen is not None:
        parts.append(f"PCIe gen{g.pcie_gen}/{g.pcie_gen_max} x{g.pcie_width}/{g.pcie_width_max}")
    if g.compute_capability:
        parts.append(f"cc {g.compute_capability}" + (" bf16" if g.bf16_supported else ""))
    if g.throttle_reasons:
        parts.append("throttle: " + ",".join(g.throttle_reasons))
    if g.processes:
        parts.append(f"{len(g.processes)} process(es)")
    return ", ".join(parts)


def hardware_panel(r: HardwareReport) -> Panel:
    t = _kv_table()
    if r.gpus:
        for g in r.gpus:
            t.add_row(f"GPU {g.index}", f"{g.name}: {_gpu_line(g)}")
    else:
        t.add_row("GPU", f"none ({r.nvml_error or 'NVML sees no GPU'})")
    c = r.cpu
    t.add_row("CPU", f"{c.model}: {c.physical_cores or '?'} physical / {c.logical_cores} logical, {r.cores} usable, "
                     f"load {c.load_1m if c.load_1m is not None else '?'}")
    m = r.memory
    limit = f" (container limit {fmt_bytes(m.cgroup_limit_bytes, '-')})" if m.cgroup_limit_bytes else ""
    t.add_row(
        "RAM",
        f"{fmt_bytes(m.ram_available_bytes, '-')} available of {fmt_bytes(m.ram_total_bytes, '-')}{limit}; "
        f"swap {fmt_bytes(m.swap_used_bytes, '-')} / {fmt_bytes(m.swap_total_bytes, '-')}",
    )
    t.add_row("/dev/shm", f"{fmt_bytes(m.shm_free_bytes, '-')} free of {fmt_bytes(m.shm_total_bytes, '-')}")
    for d in r.disks:
        speed = (
            f"; read {d.read_mb_per_s:,.1f} MB/s, {d.files_per_s:,.0f} files/s ({d.sample_files} files)"
            if d.files_per_s
            else ""
        )
        t.add_row(
            f"disk ({d.role})",
            f"{d.path}: {fmt_bytes(d.free_bytes, '-')} free of {fmt_bytes(d.total_bytes, '-')}{speed}",
        )
    return Panel(t, title="hardware", title_align="left")


def software_panel(r: HardwareReport) -> Panel:
    t = _kv_table()
    tor = r.torch
    if tor.installed:
        build = (
            "CPU-only build"
            if tor.cpu_only_build
            else f"CUDA {tor.cuda_version}, cuDNN {cudnn_text(tor.cudnn_version)}"
        )
        t.add_row(
            "torch",
            f"{tor.version} ({build}); CUDA usable: {'yes' if r.has_cuda else 'no'}"
            f"{f', {tor.device_count} device(s)' if tor.device_count else ''}",
        )
    else:
        t.add_row("torch", "not installed")
    t.add_row("driver", f"{r.driver_version} (CUDA up to {r.cuda_driver_version})" if r.driver_version else "none")
    t.add_row("NCCL", tor.nccl_version or "-")
    t.add_row("torch.compile", ("can work: " if tor.compile_ok else "cannot work: ") + (tor.compile_reason or "?"))
    t.add_row("python", f"{r.python_version or '?'} on {r.platform or '?'}")
    t.add_row("env", ", ".join(f"{k}={v}" for k, v in r.env.items()) or "nothing relevant set")
    return Panel(t, title="software", title_align="left")


def findings_table(findings: list[Finding]) -> Table:
    """One row a finding: its status word, its title, and for one that is not ok its numbers and its fix."""
    t = Table(show_header=False, box=None, pad_edge=False)
    t.add_column("status", no_wrap=True)
    t.add_column("finding")
    for f in findings:
        word, style = STATUS_STYLE[f.status]
        body = f"[bold]{f.title}[/]" if f.status != "ok" else f.title
        if f.detail and f.status != "ok":
            body += f"\n  {f.detail}"
        if f.fix and f.status != "ok":
            body += f"\n  fix: {f.fix}"
        t.add_row(f"[{style}]{word}[/]", body)
    return t


def findings_panel(findings: list[Finding], label: str) -> Panel:
    t = findings_table(findings)
    # The title holds the profile's name only: a panel's title is cut to its width (at 80 columns the label's
    # reason became `findings (profile: cpu (best match; `train` uses it wh...`); the reason is the first line.
    name, _, why = label.partition(" (")
    if why:
        return Panel(
            Group(Text(f"profile {name}: {why.removesuffix(')')}", style="dim"), t),
            title=f"findings (profile {name})",
            title_align="left",
        )
    return Panel(t, title=f"findings (profile {label})", title_align="left")


def recommendation_panel(rec: Recommendation, written: Path | None) -> Panel:
    t = Table(show_header=True, box=None, pad_edge=False)
    t.add_column("key", style="cyan", no_wrap=True)
    t.add_column("value", style="bold")
    t.add_column("why", style="dim")
    for key, value in rec.settings.items():
        if key.startswith("hardware."):
            continue
        changed = "*" if key in rec.changes else " "
        t.add_row(f"{changed}{key}", "null" if value is None else str(value), rec.reasons.get(key, ""))
    lines = [f"preset {rec.preset}; * = differs from the preset"] + [f"note: {n}" for n in rec.notes]
    lines.append(
        f"written to {written}: fasttrain train --profile {written}"
        if written
        else "save it: fasttrain doctor --write-profile my-machine.yaml"
    )
    from rich.console import Group
    from rich.text import Text

    return Panel(
        Group(Text(lines[0]), t, *[Text(line) for line in lines[1:]]), title="recommendation", title_align="left"
    )


def render(
    report: HardwareReport,
    findings: list[Finding],
    rec: Recommendation,
    label: str,
    written: Path | None,
    out: Console | None = None,
) -> None:
    """The four panels, on `out` (default: stdout's console): `doctor --all`, and the API's report in a notebook."""
    out = out or console()
    out.print(hardware_panel(report))
    out.print(software_panel(report))
    out.print(findings_panel(findings, label))
    out.print(recommendation_panel(rec, written))
    out.print(counts_line(findings))


def counts_line(findings: list[Finding]) -> str:
    counts = {s: sum(1 for f in findings if f.status == s) for s in ("fail", "warn", "ok")}
    return f"{counts['fail']} failed, {plural(counts['warn'], 'warning')}, {counts['ok']} ok"


# The recommendation's notes that list what was measured here (recommend.py): `--all` shows them, not the brief view.
MEASURED_NOTES = ("measured here: ", "... and ")


def render_brief(result: DoctorResult, out: Console | None = None) -> None:
    """`doctor` on one 80x24 screen: the verdict, the machine and profile in a line each, the findings that are not
    ok (failures first) with their fixes, the count of the rest, and the recommendation's changes in a line."""
    out = out or console()
    out.print(Text(f"verdict: {result.verdict}", style=STATUS_STYLE[result.status][1]))
    plain = functools.partial(out.print, highlight=False, markup=False)  # a path or a GPU's name is not markup
    plain(f"machine: {machine_line(result.report)}")
    plain(f"profile: {result.profile}")
    bad = [f for f in result.findings if f.status == "fail"] + [f for f in result.findings if f.status == "warn"]
    if bad:
        out.print(findings_table(bad))
    plain(f"{counts_line(result.findings)} (all of it: fasttrain doctor --all)")
    rec = result.recommendation
    changes = ", ".join(
        f"{k}={'null' if v is None else v}" for k, v in rec.changes.items() if not k.startswith("hardware.")
    )
    plain(f"recommended: preset {rec.preset}" + (f", changed: {changes}" if changes else " as it is"))
    for note in rec.notes:
        if not note.startswith(MEASURED_NOTES):
            plain(f"note: {note}")
    plain(
        f"written to {result.written}: fasttrain train --profile {result.written}"
        if result.written
        else "save it: fasttrain doctor --write-profile my-machine.yaml"
    )


def machine_line(r: HardwareReport) -> str:
    """`4 x NVIDIA A10G (22.5 GiB), 16 cores, 62.0 GiB RAM; torch 2.5.1+cu124`: the hardware panel in a line."""
    names: dict[str, int] = {}
    for g in r.gpus:
        label = f"{g.name} ({fmt_bytes(g.memory_total_bytes, '-')})"
        names[label] = names.get(label, 0) + 1
    gpus = ", ".join(label if n == 1 else f"{n} x {label}" for label, n in names.items()) or "no GPU"
    torch = r.torch.version if r.torch.installed else "not installed"
    build = " (CPU-only build)" if r.torch.installed and r.torch.cpu_only_build else ""
    return f"{gpus}, {plural(r.cores, 'core')}, {fmt_bytes(r.memory.ram_total_bytes, '-')} RAM; torch {torch}{build}"
