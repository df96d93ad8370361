"""Issue 24, finding 1: a torch build without kernels for the GPU (torch 2.14.1+cu130 has no sm_70, so a V100
fails every kernel). The torch report records the build's architecture list; doctor fails with the pip command
of the build that has them; the plan refuses with the same reason. Recorded machines, no GPU needed."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from fasttrain.core.errors import UserError
from fasttrain.doctor import checks as doctor
from fasttrain.hardware import arch
from fasttrain.hardware.report import HardwareReport
from fasttrain.plan import make_plan
from fasttrain.profiles import presets

REPORTS = Path(__file__).parent / "fixtures" / "reports"
CU130 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]  # torch.cuda.get_arch_list() of 2.14.1+cu130
FIX = "pip install --force-reinstall torch==2.14.1 torchvision --index-url https://download.pytorch.org/whl/cu126"


def load(name: str) -> HardwareReport:
    return HardwareReport.model_validate_json((REPORTS / f"{name}.json").read_text())


@pytest.mark.parametrize("capability, runs", [
    ("7.0", False),   # V100: no sm_70, no PTX older than 7.5
    ("7.5", True), ("8.0", True), ("8.6", True),
    ("8.9", True),    # RTX 4060, L4: sm_86's cubin runs on 8.9 (same major, higher minor)
    ("9.0", True), ("10.0", True), ("12.0", True),
    ("6.1", False), ("11.0", False),
])
def test_binary_compatibility_rule_on_the_cu130_list(capability: str, runs: bool) -> None:
    assert arch.runs_on(CU130, capability) is runs


def test_ptx_runs_on_newer_and_arch_specific_only_on_its_own() -> None:
    assert arch.runs_on(["sm_90", "compute_90"], "12.0")        # PTX is compiled by the driver for newer GPUs
    assert not arch.runs_on(["sm_90a"], "9.1") and arch.runs_on(["sm_90a"], "9.0")
    assert arch.runs_on(["sm_100"], "10.3") and not arch.runs_on(["sm_100"], "12.0")


def test_the_newest_wheel_that_still_has_the_gpu() -> None:
    assert arch.wheel_for("7.0").index == "cu126"
    assert arch.wheel_for("6.0").index == "cu126"
    assert arch.wheel_for("8.6").index == "cu130"
    assert arch.wheel_for("3.7") is None


def test_doctor_fails_a_v100_with_this_build_naming_the_install_fix(cli) -> None:
    res = cli("doctor", "--report-from", str(REPORTS / "v100_torch_cu130.json"), "--profile", "gcp-v100", "--json")
    assert res.code == 1, res.err
    found = {f["id"]: f for f in json.loads(res.out)["findings"]}
    assert found["torch-arch"]["status"] == "fail"
    assert "compute capability 7.0" in found["torch-arch"]["detail"]
    assert FIX in found["torch-arch"]["fix"]


def test_recorded_gpus_with_a_fitting_build_pass() -> None:
    t4 = load("t4_kaggle")
    t4 = t4.model_copy(update={"torch": t4.torch.model_copy(update={"arch_list": CU130})})
    found = {f.id: f for f in doctor.run_rules(t4)}
    assert found["torch-arch"].status == "ok"
    assert "torch-arch" not in {f.id for f in doctor.run_rules(load("v100_16"))}  # recorded before the list: silent


def test_the_plan_refuses_with_the_same_reason() -> None:
    profile = presets.resolve("gcp-v100", env={}).profile
    with pytest.raises(UserError) as refusal:
        make_plan(profile, load("v100_torch_cu130"))
    problem = refusal.value.problems[0]
    assert problem.where == "torch" and "no kernels for Tesla V100-SXM2-16GB" in problem.message
    assert FIX in problem.fix
    make_plan(profile, load("v100_16"))  # a report without the list plans as before


def test_train_dry_run_on_that_machine_exits_2_with_the_fix(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("fasttrain.train.setup.prepare.probe", lambda: load("v100_torch_cu130"))
    res = cli("train", "--profile", "gcp-v100", "--data", "synthetic", "--dry-run")
    assert res.code == 2, res.out + res.err
    assert "no kernel image is available" in res.err and "whl/cu126" in res.err


def test_the_torch_child_records_the_arch_list() -> None:
    import torch

    from fasttrain.hardware import torch_child
    seen = torch_child.collect()
    assert seen["arch_list"] == (torch.cuda.get_arch_list() if torch.version.cuda else None)
