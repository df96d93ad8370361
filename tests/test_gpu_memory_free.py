"""Issue 24, finding 7: memory for planning was the whole physical card (NVML's total): wrong on a MIG slice and
on a laptop whose desktop already holds VRAM; under DDP the back-off is off, so such a plan crashes. The plan now
fits the batch to what the device reports free: torch.cuda.mem_get_info() of the training device when the report
has it (read with a CUDA context held), else NVML's free memory. Recorded reports and a faked torch.cuda."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from fasttrain.core import arithmetic as ar
from fasttrain.estimate import calibration
from fasttrain.hardware.report import HardwareReport, TorchDevice
from fasttrain.plan import make_plan
from fasttrain.profiles import presets
from fasttrain.train.setup.footprint import fit, limits

REPORTS = Path(__file__).parent / "fixtures" / "reports"
R50 = (25_557_032, 42.0 * ar.MIB)  # resnet50 at 224 px: parameters, fp16 activation bytes per sample (meta count)


def load(name: str) -> HardwareReport:
    return HardwareReport.model_validate(json.loads((REPORTS / f"{name}.json").read_text()))


def a10g_profile():
    return presets.resolve("aws-a10g", env={}).profile


def _with_torch_free(report: HardwareReport, free: int) -> HardwareReport:
    gpu = report.gpus[0]
    device = TorchDevice(index=0, name=gpu.name, uuid=gpu.uuid, total_memory=gpu.memory_total_bytes,
                         capability=gpu.compute_capability, free_memory=free)
    return report.model_copy(update={"torch": report.torch.model_copy(update={"devices": [device]})})


def _split(report: HardwareReport) -> tuple[int, int, str | None]:
    profile = a10g_profile()
    plan = make_plan(profile, report)
    return fit(plan, limits(plan, profile, report, *R50, calibration.load()["memory"]))


def test_a_mig_slice_plans_for_its_own_memory_not_the_cards() -> None:
    """An A10G-sized card of which torch's device (a slice) reports 5 GiB free: batch 256 (~12.8 GiB) is split."""
    whole = load("a10g")
    assert _split(whole)[:2] == (256, 1)
    micro, accumulation, note = _split(_with_torch_free(whole, 5 * ar.GIB))
    assert micro * accumulation == 256 and micro <= 64, (micro, accumulation)  # was (256, 1): the card's 22.5 GiB
    assert note is not None and "GPU memory" in note


def test_memory_another_process_holds_is_not_planned_for() -> None:
    """NVML's free memory when torch's reading is missing: a desktop or another job holding 15 GiB of 22.5."""
    report = load("a10g")
    gpu = report.gpus[0].model_copy(update={"memory_free_bytes": 7 * ar.GIB, "memory_used_bytes": 15 * ar.GIB})
    micro, accumulation, _ = _split(report.model_copy(update={"gpus": [gpu]}))
    assert micro * accumulation == 256 and micro < 256


def test_where_the_capacity_comes_from() -> None:
    report = load("a10g")
    assert report.training_memory() == (report.gpus[0].memory_free_bytes, "nvml")
    assert _with_torch_free(report, 5 * ar.GIB).training_memory() == (5 * ar.GIB, "torch")
    bare = report.gpus[0].model_copy(update={"memory_free_bytes": None})
    assert report.model_copy(update={"gpus": [bare]}).training_memory() == (bare.memory_total_bytes, "total")
    assert load("cpu_only").training_memory() is None


class _FakeCuda:
    def __init__(self) -> None:
        self.asked: list[int] = []

    def install(self, monkeypatch: pytest.MonkeyPatch, torch, initialized: bool) -> None:
        props = type("Props", (), {"name": "NVIDIA A10G", "total_memory": 24 * ar.GIB, "major": 8, "minor": 6,
                                   "uuid": "c0f2a8d4"})()
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: initialized)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
        monkeypatch.setattr(torch.cuda, "mem_get_info", lambda i: (self.asked.append(i) or (5 * ar.GIB, 24 * ar.GIB)))


@pytest.mark.parametrize("initialized, read", [(True, [1]), (False, [])])
def test_a_training_process_reads_only_its_own_device(monkeypatch: pytest.MonkeyPatch, initialized: bool,
                                                      read: list[int]) -> None:
    """In-process (train already imported torch): free memory of the device it trains on, and none at all in a
    process that has not touched CUDA (the launcher of several workers must not make a context on any GPU)."""
    import torch

    from fasttrain.hardware import machine
    fake = _FakeCuda()
    fake.install(monkeypatch, torch, initialized)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 7))
    seen, error = machine._ask_loaded_torch()
    assert error is None and fake.asked == read
    frees = [d["free_memory"] for d in seen["devices"]]
    assert frees == ([None, 5 * ar.GIB] if initialized else [None, None])
    assert seen["current_device"] == 1


def test_the_torch_child_reads_every_device(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from fasttrain.hardware import torch_child
    fake = _FakeCuda()
    fake.install(monkeypatch, torch, False)
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 7))
    assert [d["free_memory"] for d in torch_child.collect()["devices"]] == [5 * ar.GIB, 5 * ar.GIB]


def test_one_training_process_starts_cuda_before_the_probe_and_a_launcher_does_not(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from fasttrain.train.parallel.agree import claim_device
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "init", lambda: calls.append("init"))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert claim_device(None) == 0 and calls == ["init"]
    assert claim_device(None, launching=True) is None and calls == ["init"]
