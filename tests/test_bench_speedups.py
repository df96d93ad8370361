"""bench speedups: which settings run where (recorded reports), table assembly, claims, and one real CPU run."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from fasttrain.bench import claims as bcl
from fasttrain.bench import speedup_summary as bsu
from fasttrain.bench import speedups as bsp
from fasttrain.bench import variants as bva
from fasttrain.hardware.report import HardwareReport
from fasttrain.profiles.schema import LoaderSpec, Profile

REPORTS = Path(__file__).parent / "fixtures" / "reports"


def report(name: str) -> HardwareReport:
    return HardwareReport.model_validate_json((REPORTS / f"{name}.json").read_text())


def profile(batch: int = 8, size: int = 16) -> Profile:
    return Profile(loader=LoaderSpec(batch_size=batch, num_workers=0, image_size=size))


def names(items: list) -> list[str]:
    return [i.name for i in items]


def test_cpu_skips_cuda_only_settings_with_the_plans_reasons() -> None:
    base, variants, skipped = bva.plan_variants(profile(), report("cpu_only"))
    reasons = {s.name: s.reason for s in skipped}
    assert set(reasons) == {"fp16", "tf32", "cudnn_benchmark"}
    assert "GradScaler" in reasons["fp16"] and "CPU" in reasons["fp16"]
    assert "Ampere" in reasons["tf32"] and "CUDA" in reasons["cudnn_benchmark"]
    assert names(variants) == ["bf16", "channels_last", "compile", "fused_optimizer", "larger_batch"]
    by = {v.name: v.plan for v in variants}
    assert base.plan.precision == "fp32" and not base.plan.compile and not base.plan.fused_optimizer
    assert by["bf16"].precision == "bf16-mixed" and by["channels_last"].channels_last
    assert by["larger_batch"].batch_size == 12  # the aggressive note's 1.5x (256 -> 384)
    # each variant changes exactly one thing from the baseline
    for v in variants:
        changed = {k for k, val in v.plan.to_dict().items() if val != base.plan.to_dict()[k]} - {
            "precision_reason", "compile_reason", "effective_batch"}
        assert len(changed) == 1 or changed == {"compile", "compile_mode"}, (v.name, changed)
    assert next(v.note for v in variants if v.name == "fused_optimizer") == ""  # train uses it on the CPU too


def test_compile_is_skipped_when_the_probe_says_it_cannot_work() -> None:
    rep = report("cpu_only")
    rep.torch.compile_ok, rep.torch.compile_reason = False, "no C compiler for inductor"
    _, variants, skipped = bva.plan_variants(profile(), rep)
    assert "compile" not in names(variants)
    assert any(s.name == "compile" and "no C compiler" in s.reason for s in skipped)


def test_gpu_reports_run_the_gpu_settings() -> None:
    _, variants, skipped = bva.plan_variants(profile(), report("a10g"))
    assert {"fp16", "bf16", "tf32", "cudnn_benchmark", "compile"} <= set(names(variants)) and not skipped
    _, variants, skipped = bva.plan_variants(profile(), report("t4_kaggle"))
    reasons = {s.name: s.reason for s in skipped}
    assert "bf16" in reasons and "Tesla T4" in reasons["bf16"]  # no bf16 on a T4: the plan's fp16 fallback
    assert "tf32" in reasons and "fp16" in names(variants)


def test_all_together_uses_fp16_when_it_ran_else_bf16() -> None:
    base, variants, _ = bva.plan_variants(profile(), report("a10g"))
    both = bva.combined(base, variants)
    assert both.plan.precision == "fp16-mixed" and both.plan.tf32 and both.plan.channels_last
    assert both.plan.compile and both.plan.fused_optimizer and both.plan.batch_size == 12
    cpu_base, cpu_variants, _ = bva.plan_variants(profile(), report("cpu_only"))
    assert bva.combined(cpu_base, cpu_variants).plan.precision == "bf16-mixed"
    assert bva.combined(cpu_base, []) is None


def test_only_restricts_the_settings() -> None:
    _, variants, skipped = bva.plan_variants(profile(), report("cpu_only"), only=["channels_last", "tf32"])
    assert names(variants) == ["channels_last"] and names(skipped) == ["tf32"]


ROUNDS = [  # recorded images/s, one dict per interleaved round
    {"baseline": 100.0, "channels_last": 90.0, "bf16": 50.0, "all": 120.0},
    {"baseline": 50.0, "channels_last": 60.0, "bf16": 26.0, "all": 55.0},   # a noisy round: everything halved
    {"baseline": 100.0, "channels_last": 110.0, "bf16": 51.0, "all": 118.0},
]


def test_speedup_is_the_median_of_per_round_ratios() -> None:
    s = bsu.summarize(ROUNDS)
    assert s["baseline"]["speedup"] == 1.0
    assert s["channels_last"]["speedup"] == pytest.approx(1.1)          # ratios 0.9, 1.2, 1.1
    assert (s["channels_last"]["speedup_low"], s["channels_last"]["speedup_high"]) == pytest.approx((0.9, 1.2))
    assert s["bf16"]["images_per_s"] == 50.0 and s["bf16"]["speedup"] == pytest.approx(0.51)
    assert s["all"]["speedup"] == pytest.approx(1.18)


def test_table_rows_carry_claims_verdicts_and_skip_reasons() -> None:
    base, variants, skipped = bva.plan_variants(profile(), report("cpu_only"), only=["channels_last", "bf16", "fp16"])
    rows = bsu.speedup_rows(bsu.summarize(ROUNDS), variants, skipped, bcl.load_claims(),
                            bva.combined(base, variants))
    by = {r["setting"]: r for r in rows}
    assert [r["setting"] for r in rows] == ["baseline", "fp16", "bf16", "channels_last", "all"]
    assert by["fp16"]["status"] == "skipped" and "GradScaler" in by["fp16"]["reason"]
    assert by["fp16"]["claimed_speedup"] == 2.0 and "kaggle-t4-guide" in by["fp16"]["claimed"]
    assert by["channels_last"]["claimed_speedup"] == 1.15 and by["channels_last"]["verdict"] == (
        "unclear: rounds disagree (0.90-1.20x)")
    assert by["bf16"]["verdict"] == "slower here" and by["bf16"]["claimed"] == "no figure in the notes"
    assert by["all"]["claimed_speedup"] == 3.8 and by["all"]["note"] == "bf16 + channels_last"
    assert bsu.product_of_singles(rows) == pytest.approx(1.1 * 0.51)


def test_claims_file_cites_a_note_for_every_figure() -> None:
    claims = bcl.load_claims()
    with (Path(__file__).parent / "fixtures" / "reference" / "field_notes.csv").open(encoding="utf-8") as fh:
        notes = {r["note"] for r in csv.DictReader(fh)}  # the five notes by short name (docs/field-notes.md)
    for row in claims:
        if row["claimed_speedup"]:
            assert float(row["low"]) <= float(row["claimed_speedup"]) <= float(row["high"])
            assert row["source"].endswith(".md") and row["quote"]
            assert row["source"].removesuffix(".md") in notes, row["source"]
    figures = {r["setting"]: r["claimed_speedup"] for r in claims if r["source"] == "optimal-single-gpu-a10g.md"}
    assert figures == {"fp16": "2.0", "channels_last": "1.15", "tf32": "1.1", "compile": "1.2", "workers": "1.5",
                       "all": "3.8"}


def test_verdict_words() -> None:
    assert bsu.verdict(1.01, 1.2) == "no gain here"
    assert bsu.verdict(0.8, 1.2) == "slower here"
    assert bsu.verdict(1.3, 1.2) == "as claimed or better"
    assert bsu.verdict(1.1, None) == "faster"
    assert bsu.verdict(1.1, 1.15, 1.05, 1.2) == "96% of the claim"  # every round faster: the median stands
    assert bsu.verdict(0.8, 1.2, 0.7, 1.1) == "unclear: rounds disagree (0.70-1.10x)"
    assert bsu.verdict(1.01, 1.2, 0.7, 1.3) == "no gain here"


def test_a_real_run_on_the_cpu_measures_and_skips() -> None:
    from fasttrain.models.registry import create_model

    result = bsp.bench_speedups(profile(batch=8), report("cpu_only"), lambda: create_model("tiny_cnn", 4),
                                image_size=16, num_classes=4, steps=1, rounds=2, warmup_steps=1,
                                only=["channels_last", "larger_batch", "tf32"])
    by = {r["setting"]: r for r in result["rows"]}
    assert set(by) == {"baseline", "channels_last", "tf32", "larger_batch", "all"}
    assert by["tf32"]["status"] == "skipped"
    for name in ("baseline", "channels_last", "larger_batch", "all"):
        assert by[name]["status"] == "measured" and by[name]["images_per_s"] > 0
        assert math.isfinite(by[name]["speedup"])
    assert len(result["samples"]) == 2 and all(len(r) == 4 for r in result["samples"])
    assert by["all"]["note"] == "channels_last + larger_batch"


def test_a_setting_that_fails_at_run_time_is_a_skipped_row_not_a_crash() -> None:
    import torch
    from torch import nn

    class OomAbove8(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[0] > 8:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return self.fc(x.mean((2, 3)))

    result = bsp.bench_speedups(profile(batch=8), report("cpu_only"), OomAbove8, image_size=16, num_classes=4,
                                steps=1, rounds=1, warmup_steps=1, only=["channels_last", "larger_batch"])
    by = {r["setting"]: r for r in result["rows"]}
    assert by["larger_batch"]["status"] == "skipped" and by["larger_batch"]["reason"] == (
        "failed to run: out of memory at batch 12")
    assert by["channels_last"]["status"] == "measured"
    assert "all" not in by  # one setting left: nothing to combine


def test_the_cuda_home_warning_of_torch_is_silenced(caplog: pytest.LogCaptureFixture) -> None:
    """`No CUDA runtime is found, using CUDA_HOME=...` (torch.utils.cpp_extension, imported by torch.compile on a
    machine with a CUDA toolkit and no GPU) leaked into `bench speedups` output; other lines still pass."""
    import logging

    bsp.silence_cuda_home_warning()
    bsp.silence_cuda_home_warning()  # idempotent
    logger = logging.getLogger(bsp.CUDA_HOME_LOGGER)
    assert logger.filters.count(bsp._drop_cuda_home_warning) == 1
    with caplog.at_level(logging.WARNING, logger=bsp.CUDA_HOME_LOGGER):
        logger.warning("No CUDA runtime is found, using CUDA_HOME='%s'", "/usr/local/cuda")
        logger.warning("something else")
    assert [r.getMessage() for r in caplog.records] == ["something else"]


def test_every_bench_rotates_its_rounds_one_way() -> None:
    """bench/rounds.rotated: the order speedups, loader and the input paths time their candidates in."""
    from fasttrain.bench.rounds import rotated
    items = ["a", "b", "c", "d"]
    assert [rotated(items, r) for r in range(3)] == [list("abcd"), list("bcda"), list("cdab")]
    # bench loader: 8 settings over 3 rounds start 2 apart (8 // 3), so the rounds spread over the list
    eight = list("abcdefgh")
    assert [rotated(eight, r, step=2)[0] for r in range(5)] == ["a", "c", "e", "g", "a"]
    assert rotated([], 3) == [] and rotated(["x"], 7) == ["x"]


def test_the_timed_steps_carry_no_non_finite_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24, finding 8: the fp32 baseline's steps went through the guard (on CUDA a GradScaler that syncs
    with .item() and passes over the gradients each step unless the optimizer is fused; on the CPU the gradient
    norm), a cost no plain loop has, which the fused variant escaped: every ratio leaned. Timed steps are plain."""
    import torch

    from fasttrain.models.registry import create_model
    from fasttrain.train.loop import precision

    checks: list[str] = []
    real_norm, real_step = precision.total_norm, torch.amp.GradScaler.step
    monkeypatch.setattr(precision, "total_norm", lambda params: checks.append("norm") or real_norm(params))
    monkeypatch.setattr(torch.amp.GradScaler, "step", lambda self, opt, *a, **k: checks.append("scaler") or
                        real_step(self, opt, *a, **k))
    base, _, _ = bva.plan_variants(profile(), report("cpu_only"), only=[])
    cand = bsp.build_candidate(base, lambda: create_model("tiny_cnn", 4), image_size=16, num_classes=4,
                               optim=profile().optim, warmup_steps=1)
    assert not isinstance(cand, bva.Skipped)
    checks.clear()
    bsp.run_steps(cand, 3)
    assert checks == [] and cand.trainer.engine.precision.checker is None


def test_one_configuration_is_on_the_device_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24, finding 14: every configuration stayed on the GPU for the whole bench; on an 8 GB 4060 or a 16 GB
    T4 the later ones failed with out-of-memory. Now each is parked in host memory except while it runs: when a
    configuration's steps run, every other one is parked (checked on the CPU, where parking is the bookkeeping
    alone; tests/test_bench_park.py moves real tensors)."""
    from fasttrain.bench import park as bpark
    from fasttrain.models.registry import create_model
    monkeypatch.setattr(bpark.Parking, "park", lambda self, *a: setattr(self, "parked", True))
    monkeypatch.setattr(bpark.Parking, "unpark", lambda self, *a: setattr(self, "parked", False))
    built: list = []
    real_build, real_steps = bsp.build_candidate, bsp.run_steps
    monkeypatch.setattr(bsp, "build_candidate", lambda *a, **k: built.append(real_build(*a, **k)) or built[-1])
    on_device: list[list[str]] = []

    def steps(cand, n):
        on_device.append([c.variant.name for c in built if not c.parking.parked])
        return real_steps(cand, n)

    monkeypatch.setattr(bsp, "run_steps", steps)
    bsp.bench_speedups(profile(batch=8), report("cpu_only"), lambda: create_model("tiny_cnn", 4), image_size=16,
                       num_classes=4, steps=1, rounds=2, warmup_steps=1, only=["channels_last", "larger_batch"])
    assert len(built) == 4 and all(len(live) <= 1 for live in on_device), on_device
    assert sum(len(live) == 1 for live in on_device) >= 4 * 2  # every timed turn (4 configurations x 2 rounds)
