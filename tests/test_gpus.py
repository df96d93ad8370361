"""GPU spec lookup: names, aliases, NVML names, unknown peaks stay None, close matches for typos."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from fasttrain.core.errors import UserError
from fasttrain.hardware import gpus

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "fixtures" / "reference" / "gpus.csv"  # the published rows data/gpus.csv is built from
THROUGHPUT = ROOT / "benchmarks" / "reference_throughput.csv"      # published training images/s, with sources
FEED_TARGETS = ROOT / "src" / "fasttrain" / "data" / "feed_targets.csv"


@pytest.mark.parametrize("name, expected", [
    ("A10G", "A10G (AWS g5)"), ("a10g", "A10G (AWS g5)"), ("NVIDIA A10G", "A10G (AWS g5)"),
    ("A100 80GB", "A100 80GB SXM4"), ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM4"), ("A100", "A100 40GB SXM4"),
    ("T4", "T4"), ("Tesla T4", "T4"), ("V100", "V100 SXM2 16GB"), ("Tesla V100-SXM2-32GB", "V100 SXM2 32GB"),
    ("RTX 4060 Laptop", "RTX 4060 Laptop (ref boost 1890 MHz)"),
    ("NVIDIA GeForce RTX 4060 Laptop GPU", "RTX 4060 Laptop (ref boost 1890 MHz)"),
    ("NVIDIA H100 80GB HBM3", "H100 SXM5 80GB"), ("rtx-3090", "RTX 3090"),
])
def test_find_gpu_by_name_alias_and_nvml_name(name: str, expected: str) -> None:
    spec = gpus.find_gpu(name)
    assert spec is not None and spec.name == expected


def test_a_memory_size_is_never_dropped_to_match() -> None:
    assert gpus.find_gpu("A100 90GB") is None
    assert gpus.find_gpu("") is None


def test_every_shipped_profile_gpu_is_in_the_spec_file() -> None:
    from fasttrain.profiles import presets
    from fasttrain.profiles.files import preset_names
    for name in preset_names():
        gpu = presets.resolve_file_only(name).profile.hardware.gpu
        assert gpu is None or gpus.find_gpu(gpu) is not None, name


def test_peaks_by_precision_in_flops() -> None:
    a100 = gpus.get_gpu("A100 80GB")
    assert a100.peak_flops("fp32") == pytest.approx(19.5e12)
    assert a100.peak_flops("fp32", tf32=True) == pytest.approx(156e12)
    assert a100.peak_flops("fp16-mixed") == pytest.approx(312e12)
    assert a100.peak_flops("bf16-mixed") == pytest.approx(312e12)
    assert a100.bandwidth_bytes_per_s == pytest.approx(2039e9)
    assert a100.memory_bytes == 80 * 10**9
    t4 = gpus.get_gpu("T4")
    assert t4.peak_flops("bf16-mixed") is None          # no bf16 tensor cores on Turing
    assert t4.peak_flops("fp32", tf32=True) == pytest.approx(8.1e12)  # TF32 asked, not supported: fp32
    assert t4.compute_capability == "7.5" and not t4.tf32_supported


def test_unknown_cells_stay_none_never_invented() -> None:
    a10g = gpus.get_gpu("A10G")
    assert a10g.fp16_tensor_tflops is None and a10g.fp32_tflops is None and a10g.tf32_tflops is None
    assert a10g.peak_flops("fp16-mixed") is None
    assert a10g.memory_gb == 24 and a10g.bandwidth_gbps == 600
    laptop_110w = gpus.get_gpu("RTX 4060 Laptop 110W")
    assert laptop_110w.bandwidth_gbps is None and laptop_110w.fp16_tensor_tflops == pytest.approx(28.26)


def test_unknown_name_is_a_user_error_with_close_matches() -> None:
    with pytest.raises(UserError) as exc:
        gpus.get_gpu("A100 80G", where="--gpu")
    line = exc.value.lines()[0]
    assert line.startswith("--gpu: unknown GPU 'A100 80G'") and "did you mean" in line and "a100 80gb" in line.lower()


def test_spec_file_matches_the_reference_rows_and_keeps_sources() -> None:
    ref = {r["gpu"]: r for r in csv.DictReader(REFERENCE.open())}
    assert sorted(gpus.gpu_names()) == sorted(ref)
    for spec in gpus.load_specs():
        r = ref[spec.name]
        assert spec.source == r["source"]
        for field, col in (("memory_gb", "memory_gb"), ("bandwidth_gbps", "bandwidth_gbps"),
                           ("fp16_tensor_tflops", "fp16_tensor_tflops_dense"), ("fp32_tflops", "fp32_tflops"),
                           ("tf32_tflops", "tf32_tflops_dense")):
            assert getattr(spec, field) == (float(r[col]) if r[col] else None), (spec.name, field)
        assert spec.bf16_supported == r["bf16_supported"].startswith("yes")
        assert f"(cc {spec.compute_capability})" in r["bf16_supported"], spec.name


def test_feed_targets_are_published_rows() -> None:
    """doctor's feed targets are single-GPU rows of the published throughputs, same number, same source."""
    published = list(csv.DictReader(THROUGHPUT.open(encoding="utf-8")))
    targets = list(csv.DictReader(FEED_TARGETS.open(encoding="utf-8")))
    assert targets
    for target in targets:
        rows = [r for r in published if r["model"] == target["model"] and r["precision"] == target["precision"]
                and r["num_gpus"] == "1" and float(r["images_per_sec"]) == float(target["images_per_sec"])
                and gpus.find_gpu(r["gpu"]) is gpus.find_gpu(target["gpu"])]
        assert len(rows) == 1, target["gpu"]
        assert target["source"].split(" (")[0] == rows[0]["source"].split(" (")[0], target["gpu"]


def test_a_gpu_without_published_peaks_is_priced_with_its_named_stand_in() -> None:
    """The A10G's own cells stay empty (above); data/gpu_standins.csv names the A10 datasheet as its stand-in (the
    mapping Lightning's throughput table uses), so the aws-a10g preset gets a forecast that says whose peaks it used."""
    a10g, a10 = gpus.get_gpu("A10G"), gpus.get_gpu("A10")
    priced, note = gpus.with_standin_peaks(a10g)
    assert (priced.fp16_tensor_tflops, priced.fp32_tflops, priced.tf32_tflops) == (
        a10.fp16_tensor_tflops, a10.fp32_tflops, a10.tf32_tflops)
    assert (priced.memory_gb, priced.bandwidth_gbps, priced.name) == (a10g.memory_gb, a10g.bandwidth_gbps, a10g.name)
    assert note is not None and "A10 (datasheet)" in note and "unpublished" in note
    t4 = gpus.get_gpu("T4")
    assert gpus.with_standin_peaks(t4) == (t4, None)   # its own peaks: no stand-in


def test_the_aws_a10g_forecast_names_its_stand_in(cli) -> None:
    import json
    res = cli("estimate", "--profile", "aws-a10g", "--model", "resnet18", "--json")
    assert res.code == 0, res.err
    device = json.loads(res.out)["forecast"]["device"]
    assert device["peaks_from"] == "A10 (datasheet)" and not device["unknown"] and device["peak_flops"] == 125e12
