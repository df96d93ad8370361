"""best_preset() and recommend() on the recorded reports, and profiles written by --write-profile loading
through presets.resolve exactly as `train --profile FILE` loads them."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from fasttrain.core.errors import UserError
from fasttrain.hardware.report import GpuInfo, HardwareReport, MemoryInfo, TorchInfo
from fasttrain.profiles import presets
from fasttrain.profiles.preset_match import best_preset
from fasttrain.profiles.recommend import batch_for_vram, recommend
from fasttrain.profiles.writer import profile_text, write_profile

REPORTS = Path(__file__).parent / "fixtures" / "reports"
ALL = sorted(p.stem for p in REPORTS.glob("*.json"))
MiB, GiB = 2**20, 2**30


def load(name: str) -> HardwareReport:
    return HardwareReport.model_validate_json((REPORTS / f"{name}.json").read_text())


def one_gpu(name: str, mib: int, cc: str) -> HardwareReport:
    return HardwareReport(
        memory=MemoryInfo(ram_total_bytes=64 * GiB, ram_available_bytes=60 * GiB, shm_free_bytes=32 * GiB,
                          shm_total_bytes=32 * GiB),
        torch=TorchInfo(version="2.5.1+cu124", cuda_version="12.4", cpu_only_build=False, cuda_available=True,
                        device_count=1, compile_ok=True),
        gpus=[GpuInfo(index=0, name=name, memory_total_bytes=mib * MiB, compute_capability=cc,
                      bf16_supported=float(cc) >= 8.0)])


@pytest.mark.parametrize("name, preset", [
    ("t4_kaggle", "kaggle-t4"), ("container_shm64", "kaggle-t4"), ("rtx4060_laptop", "laptop-4060"),
    ("v100_16", "gcp-v100"), ("v100_32", "gcp-v100"), ("a10g", "aws-a10g"), ("cpu_only", "cpu"),
    ("gpu_with_cpu_torch", "cpu"), ("old_driver", "cpu"),  # torch cannot use the GPU: training runs on the CPU
    ("busy_gpu", "aws-a10g"), ("throttled_gpu", "aws-a10g"), ("pcie_low", "aws-a10g"),  # nearest by VRAM and bf16
    ("a10g_x4", "aws-a10g"),
])
def test_best_preset_per_fixture(name: str, preset: str) -> None:
    assert best_preset(load(name)) == preset


def test_best_preset_by_memory_and_bf16_for_unknown_gpus() -> None:
    assert best_preset(one_gpu("NVIDIA GeForce RTX 3060", 12288, "8.6")) == "laptop-4060"
    assert best_preset(one_gpu("Tesla P100-PCIE-16GB", 16280, "6.0")) in ("kaggle-t4", "gcp-v100")
    assert best_preset(one_gpu("NVIDIA A10", 24564, "8.6")) == "aws-a10g"  # 'a10' is not 'a10g'; memory decides


@pytest.mark.parametrize("vram_mib, batch", [
    (None, 16), (4096, 16), (8188, 16), (15360, 64), (23028, 64), (32768, 128), (40960, 128), (81920, 256),
])
def test_batch_by_vram_table(vram_mib: int | None, batch: int) -> None:
    row = batch_for_vram(None if vram_mib is None else vram_mib * MiB)
    assert row.batch_size == batch and row.source.startswith("field note '")


def test_preset_batch_kept_on_its_own_machine_and_table_elsewhere() -> None:
    assert recommend(load("t4_kaggle")).settings["loader.batch_size"] == 256  # kaggle-t4 on a T4
    assert recommend(load("a10g")).settings["loader.batch_size"] == 256  # aws-a10g on an A10G
    v100_32 = recommend(load("v100_32"))  # gcp-v100 was written for 16 GB: the table's V100 32 GB row
    assert v100_32.settings["loader.batch_size"] == 128 and "V100 32 GB" in v100_32.reasons["loader.batch_size"]
    a100 = recommend(load("busy_gpu"))
    assert a100.settings["loader.batch_size"] == 128 and "A100 40-80 GB" in a100.reasons["loader.batch_size"]
    assert recommend(one_gpu("NVIDIA A100-SXM4-80GB", 81920, "8.0")).settings["loader.batch_size"] == 256


def test_workers_are_three_quarters_of_the_cores() -> None:
    assert recommend(load("a10g")).settings["loader.num_workers"] == 12  # the A10G note: 16 cores -> 12
    assert recommend(load("t4_kaggle")).settings["loader.num_workers"] == 3
    assert recommend(load("busy_gpu")).settings["loader.num_workers"] == 24  # 32 usable of 64 logical


def test_workers_capped_by_the_ram_budget() -> None:
    report = load("a10g")
    small = report.model_copy(update={"memory": report.memory.model_copy(update={"ram_total_bytes": 8 * GiB})})
    rec = recommend(small)  # budget 4 GiB; 256 x 224 px batches are 230 MiB, x prefetch 3 -> 5 workers
    assert rec.settings["loader.num_workers"] == 5 and "RAM budget" in rec.reasons["loader.num_workers"]


def test_workers_capped_by_a_64mb_shm() -> None:
    rec = recommend(load("container_shm64"))
    assert rec.settings["loader.num_workers"] == 0
    assert rec.settings["loader.prefetch_factor"] is None and rec.settings["loader.persistent_workers"] is False
    assert any("--shm-size" in n for n in rec.notes)


@pytest.mark.parametrize("name, precision, tf32", [
    ("a10g", "bf16-mixed", True), ("rtx4060_laptop", "bf16-mixed", True), ("t4_kaggle", "fp16-mixed", False),
    ("v100_16", "fp16-mixed", False), ("cpu_only", "fp32", False),
])
def test_precision_by_compute_capability(name: str, precision: str, tf32: bool) -> None:
    rec = recommend(load(name))
    assert rec.settings["speed.precision"] == precision and rec.settings["speed.tf32"] is tf32


def test_speed_switches_on_gpus_and_off_on_cpus() -> None:
    gpu = recommend(load("a10g")).settings
    assert (
        gpu["speed.compile"]
        and gpu["speed.channels_last"]
        and gpu["speed.cudnn_benchmark"]
        and gpu["loader.pin_memory"]
    )
    cpu = recommend(load("cpu_only")).settings
    assert not cpu["speed.cudnn_benchmark"] and not cpu["loader.pin_memory"] and not cpu["speed.tf32"]
    assert cpu["speed.compile"] == presets.resolve_file_only("cpu").profile.speed.compile  # compile_ok there
    pascal = recommend(one_gpu("Tesla P100-PCIE-16GB", 16280, "6.0")).settings
    assert pascal["speed.precision"] == "fp32" and not pascal["speed.compile"] and not pascal["speed.channels_last"]


def test_changes_hold_only_what_differs_from_the_preset() -> None:
    rec = recommend(load("a10g"))
    preset = presets.resolve_file_only("aws-a10g").profile
    for key, value in rec.changes.items():
        section, field = key.split(".")
        assert getattr(getattr(preset, section), field) != value
    assert "loader.batch_size" not in rec.changes and "loader.num_workers" not in rec.changes


def test_multi_gpu_machines_get_a_note() -> None:
    """A hand-built g5.12xlarge report (4 x A10G): the advice is the launcher flag that trains on all four."""
    notes = recommend(load("a10g_x4")).notes
    assert any("fasttrain train --nproc-per-node 4" in n for n in notes), notes


@pytest.mark.parametrize("name", ALL)
def test_written_profile_round_trips_through_presets_resolve(name: str, tmp_path: Path) -> None:
    report = load(name)
    rec = recommend(report)
    path = write_profile(rec, report, tmp_path / f"{name}.yaml")
    resolved = presets.resolve(str(path), env={})
    assert resolved.chain[0] == f"parent {rec.preset}"
    dumped = resolved.profile.model_dump()
    for key, value in rec.settings.items():
        section, field = key.split(".")
        assert dumped[section][field] == value, key
    data = yaml.safe_load(path.read_text())
    assert data["extends"] == rec.preset
    written = {f"{s}.{k}" for s, body in data.items() if isinstance(body, dict) for k in body}
    assert written == set(rec.changes)


def test_written_profile_has_a_generated_header(tmp_path: Path) -> None:
    report = load("t4_kaggle")
    text = profile_text(recommend(report), report, "kaggle-box", "kaggle-box.yaml")
    assert text.startswith("# Generated by `fasttrain doctor --write-profile`")
    assert "Tesla T4" in text and "extends: kaggle-t4" in text and "--profile kaggle-box.yaml" in text


def test_write_profile_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    report = load("cpu_only")
    path = tmp_path / "mine.yaml"
    path.write_text("keep: me\n")
    with pytest.raises(UserError) as err:
        write_profile(recommend(report), report, path)
    assert "already exists" in str(err.value) and "--force" in str(err.value)
    assert path.read_text() == "keep: me\n"
    write_profile(recommend(report), report, path, force=True)
    assert presets.resolve(str(path), env={}).profile.hardware.cpu_cores == 8


def test_write_profile_rejects_bad_names(tmp_path: Path) -> None:
    report = load("cpu_only")
    with pytest.raises(UserError, match="yaml"):
        write_profile(recommend(report), report, tmp_path / "mine.txt")
    with pytest.raises(UserError, match="no such directory"):
        write_profile(recommend(report), report, tmp_path / "nope" / "mine.yaml")


def test_the_gpu_torch_cannot_see_is_not_the_one_matched() -> None:
    """CUDA_VISIBLE_DEVICES=1 on a T4 + A10G box: torch trains on the A10G."""
    t4, a10g = load("t4_kaggle").gpus[0], load("a10g").gpus[0]
    report = load("a10g").model_copy(
        update={"gpus": [t4.model_copy(update={"visible_to_torch": False}), a10g.model_copy(update={"index": 1})]}
    )
    assert best_preset(report) == "aws-a10g"


def test_cpu_precision_follows_the_cpu_preset_only_where_bf16_is_fast() -> None:
    preset = presets.resolve_file_only("cpu").profile.speed.precision
    slow = recommend(load("cpu_only"))  # no AVX512-BF16/AMX
    assert slow.settings["speed.precision"] == "fp32"
    report = load("cpu_only")
    fast = report.model_copy(update={"torch": report.torch.model_copy(update={"cpu_bf16_fast": True})})
    assert recommend(fast).settings["speed.precision"] == ("fp32" if preset == "fp16-mixed" else preset)
