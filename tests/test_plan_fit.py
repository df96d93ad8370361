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


def test_estimate_and_train_dry_run_with_four_processes(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    res = cli("estimate", "--profile", "aws-a10g", "--model", "resnet50", "--nproc-per-node", "4",
              "--gpu", "A100 80GB", "--json")
    assert res.code == 0, res.err
    d = json.loads(res.out)
    assert d["forecast"]["loader"]["workers"] == 3
    monkeypatch.setattr("fasttrain.train.setup.prepare.probe", g5_12x_small)
    res = cli("train", "--profile", "aws-a10g", "--data", "shapes", "--nproc-per-node", "4", "--dry-run")
    assert res.code == 0, res.err
    assert "workers      3 (asked 12: 4 processes share 16 cores and the 31.0 GiB loader budget)" in res.out
    assert "note         workers 12 -> 3 per process: 4 processes share 16 cores" in res.out
    # tensors in memory need no worker, however many processes share the machine
    res = cli("train", "--profile", "aws-a10g", "--data", "synthetic", "--nproc-per-node", "4", "--dry-run")
    assert res.code == 0, res.err
    assert "workers      0 (asked 12: synthetic data are tensors in memory: nothing to decode per step" in res.out


def test_profiles_show_reports_the_cap_as_a_note(cli) -> None:
    res = cli("profiles", "show", "aws-a10g", "--nproc-per-node", "4")
    assert res.code == 0, res.err
    assert "the plan runs 3 workers per process" in res.out + res.err


# --- the whole training footprint against the machine the run uses (train/setup/footprint.py) ---

def small_ram_cpu(available_gib: float = 20) -> HardwareReport:
    r = report("cpu_small_ram")  # 2 cores, 24 GiB, 20 GiB available: the machine the OOM killer hit
    return r.model_copy(update={"memory": r.memory.model_copy(
        update={"ram_available_bytes": int(available_gib * ar.GIB)})})


def test_fit_micro_batch_keeps_the_effective_batch() -> None:
    from fasttrain.plan import fit_micro_batch
    assert fit_micro_batch(256, 1, lambda b: b <= 300) == (256, 1)
    assert fit_micro_batch(256, 1, lambda b: b <= 100) == (64, 4)
    assert fit_micro_batch(256, 2, lambda b: b <= 128) == (128, 4)
    assert fit_micro_batch(96, 1, lambda b: b <= 40) == (32, 3)    # divisors only: 96 = 32 x 3
    assert fit_micro_batch(7, 1, lambda b: b <= 3) == (1, 7)
    assert fit_micro_batch(256, 1, lambda b: False) is None


def test_the_decision_on_fixed_footprints() -> None:
    from fasttrain.train.setup.footprint import Limit, fit
    plan = make_plan(a10g(), small_ram_cpu())
    gib = ar.GIB
    micro, acc, note = fit(plan, [Limit("RAM", 20 * gib, lambda b: int(gib + b * 0.16 * gib))])
    assert (micro, acc) == (64, 4)
    assert note == ("batch 256 does not fit in 20.0 GiB of RAM (needs ~42.0 GiB): micro-batch 64 x 4 accumulation "
                    "steps, effective batch 256 and LR unchanged")
    assert fit(plan, [Limit("RAM", 20 * gib, lambda b: b)]) == (256, 1, None)
    # a resumed checkpoint's split is kept when it still fits (a resume must not change the micro-batch)
    assert fit(plan, [Limit("RAM", 20 * gib, lambda b: b)], prefer=(128, 2)) == (128, 2, None)
    assert fit(plan, [Limit("RAM", 20 * gib, lambda b: int(gib + b * 0.16 * gib))], prefer=(128, 2))[:2] == (64, 4)
    assert fit(plan, [Limit("RAM", 20 * gib, lambda b: b)], prefer=(128, 4)) == (256, 1, None)
    with pytest.raises(UserError, match=r"not even batch 1 fits in 3.0 GiB of GPU memory \(needs ~4.0 GiB; batch 256"):
        fit(plan, [Limit("RAM", 20 * gib, lambda b: b), Limit("GPU memory", 3 * gib, lambda b: 4 * gib + b)])


def test_gpu_memory_and_a_small_host_are_both_checked() -> None:
    from fasttrain.estimate import calibration
    from fasttrain.train.setup.footprint import fit, limits
    constants = calibration.load()["memory"]
    r50 = (25_557_032, 42.0 * ar.MIB)  # resnet50 at 224 px, fp16 activations per sample (meta count)
    plan = make_plan(a10g(), report("a10g"))
    assert fit(plan, limits(plan, a10g(), report("a10g"), *r50, constants))[:2] == (256, 1)  # 12.8 of 22.5 GiB
    laptop = report("rtx4060_laptop")
    plan = make_plan(a10g(), laptop)
    micro, acc, note = fit(plan, limits(plan, a10g(), laptop, *r50, constants))
    assert micro * acc == 256 and micro < 256 and "of GPU memory" in note
    small = report("a10g")
    small = small.model_copy(update={"memory": small.memory.model_copy(
        update={"ram_total_bytes": 16 * ar.GIB, "ram_available_bytes": 8 * ar.GIB})})
    plan = make_plan(a10g(), small)
    micro, acc, note = fit(plan, limits(plan, a10g(), small, *r50, constants))
    assert micro * acc == 256 and micro < 256 and "GiB of RAM" in note


def test_train_dry_run_on_a_small_ram_cpu_splits_the_batch(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fasttrain.train.setup.prepare.probe", small_ram_cpu)
    res = cli("train", "--profile", "aws-a10g", "--model", "resnet50", "--data", "synthetic", "--epochs", "90",
              "--dry-run")
    assert res.code == 0, res.err
    assert "batch        128 per device x 2 accumulation x 1 device = effective batch 256" in res.out
    assert "-> 0.5 at batch 256" in res.out
    # synthetic data are in memory: 0 loader workers, so no loader buffers in the footprint (~24 GiB, not ~25.8)
    assert ("note         batch 256 does not fit in 20.0 GiB of RAM (needs ~24.0 GiB): micro-batch 128 x 2 "
            "accumulation steps, effective batch 256 and LR unchanged") in res.out
    from fasttrain.train.setup import footprint
    assert ("resnet50", 224, 10, "fp32") in footprint._COUNTS  # counted once per process
    monkeypatch.setattr("fasttrain.train.setup.prepare.probe", lambda: small_ram_cpu(available_gib=1.0))
    res = cli("train", "--profile", "aws-a10g", "--model", "resnet50", "--data", "synthetic", "--dry-run")
    assert res.code == 2 and "Traceback" not in res.err
    assert "not even batch 1 fits in 1.0 GiB of RAM" in res.err and len(res.err.strip().splitlines()) == 1


def test_a_batch_that_fits_is_unchanged(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fasttrain.train.setup.prepare.probe", small_ram_cpu)
    res = cli("train", "--profile", "aws-a10g", "--model", "resnet50", "--data", "synthetic", "--dry-run",
              "--set", "loader.batch_size=64", "--json")
    assert res.code == 0, res.err
    plan = json.loads(res.out)["plan"]
    assert (plan["batch_size"], plan["accumulation_steps"]) == (64, 1)
    assert not any("does not fit" in n for n in plan["notes"])
