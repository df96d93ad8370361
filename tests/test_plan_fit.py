"""A plan fits the machine it runs on: N processes share its cores and loader RAM (workers per process are
capped, with a note), and the whole training footprint fits its RAM or GPU memory (micro-batch x accumulation)."""
from __future__ import annotations

import json

import pytest

from conftest import FIXTURES
from fasttrain.core import arithmetic as ar
from fasttrain.core.errors import UserError
from fasttrain.hardware.report import HardwareReport
from fasttrain.plan import cores_per_process_workers, make_plan
from fasttrain.profiles import presets


def report(name: str) -> HardwareReport:
    return HardwareReport.model_validate(json.loads((FIXTURES / "reports" / f"{name}.json").read_text()))


def g5_12x_small() -> HardwareReport:
    """4 A10Gs (a10g_x4.json) in a machine with the aws-a10g preset's host: 16 cores, 62 GiB."""
    r = report("a10g_x4")
    ram = 62 * ar.GIB
    return r.model_copy(update={
        "cpu": r.cpu.model_copy(update={"logical_cores": 16, "usable_cores": 16}),
        "memory": r.memory.model_copy(update={"ram_total_bytes": ram, "ram_available_bytes": ram - ar.GIB,
                                              "host_ram_total_bytes": ram})})


def a10g(*sets: str):
    return presets.resolve("aws-a10g", env={}, sets=list(sets)).profile


def test_cores_per_process() -> None:
    assert cores_per_process_workers(16, 4) == 3 and cores_per_process_workers(48, 4) == 11
    assert cores_per_process_workers(4, 4) == 0 and cores_per_process_workers(2, 4) == 0


def test_four_processes_share_the_cores_and_the_loader_budget() -> None:
    plan = make_plan(a10g("world.gpus_per_node=4"), g5_12x_small())
    assert plan.workers_requested == 12 and plan.workers == 3 and plan.prefetch_factor == 3
    note = "workers 12 -> 3 per process: 4 processes share 16 cores and the 31.0 GiB loader budget"
    assert note in plan.notes
    assert plan.loader_ram_bytes <= plan.ram_budget_bytes
    assert plan.batch_size == 256 and plan.effective_batch == 1024  # the batch is not touched


def test_the_budget_caps_below_the_cores_share() -> None:
    # 2 processes: 7 workers each by the cores; 7 x 3 x 230 MiB x 2 = 9.4 GiB > 8 GiB budget -> 5
    profile = a10g("world.gpus_per_node=2", "hardware.ram_budget_fraction=0.129")
    plan = make_plan(profile, g5_12x_small())
    assert plan.workers == 5 and plan.loader_ram_bytes <= plan.ram_budget_bytes
    assert any(n.startswith("workers 12 -> 5 per process: 2 processes share 16 cores") for n in plan.notes)


def test_only_what_no_worker_count_fixes_is_refused() -> None:
    profile = a10g("world.gpus_per_node=4", "loader.batch_size=4096", "loader.num_workers=0",
                   "loader.prefetch_factor=null", "loader.persistent_workers=false")
    small = g5_12x_small().model_copy(update={"memory": g5_12x_small().memory.model_copy(
        update={"ram_total_bytes": 8 * ar.GIB})})
    with pytest.raises(UserError, match="even with 0 workers"):
        make_plan(profile, small)


def test_one_process_is_unchanged() -> None:
    plan = make_plan(a10g(), report("a10g"))
    assert plan.workers == 12 and plan.workers_reason == "asked" and not any("per process" in n for n in plan.notes)
    plan = make_plan(a10g(), report("rtx4060_laptop"))
    assert "per process" not in plan.workers_reason


def test_estimate_and_train_dry_run_with_four_processes(cli, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    res = cli("estimate", "--profile", "aws-a10g", "--model", "resnet50", "--nproc-per-node", "4",
              "--gpu", "A100 80GB", "--json")
    assert res.code == 0, res.err
    d = json.loads(res.out)
    assert d["forecast"]["loader"]["workers"] == 3
    monkeypatch.setattr("fasttrain.train.gather.probe", g5_12x_small)
    res = cli("train", "--profile", "aws-a10g", "--data", "synthetic", "--nproc-per-node", "4", "--dry-run")
    assert res.code == 0, res.err
    assert "workers      3 (asked 12: 4 processes share 16 cores and the 31.0 GiB loader budget)" in res.out
    assert "note         workers 12 -> 3 per process: 4 processes share 16 cores" in res.out


def test_profiles_show_reports_the_cap_as_a_note(cli) -> None:  # noqa: ANN001
    res = cli("profiles", "show", "aws-a10g", "--nproc-per-node", "4")
    assert res.code == 0, res.err
    assert "the plan runs 3 workers per process" in res.out + res.err
