"""Batch search: a real tiny model that runs out of (CUDA) memory above a threshold, on the CPU."""
from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from fasttrain.core.errors import JobFailed, UserError
from fasttrain.hardware.report import CpuInfo, HardwareReport, MemoryInfo
from fasttrain.plan import make_plan
from fasttrain.profiles.schema import LoaderSpec, OptimSpec, Profile
from fasttrain.train.loop.oom import is_out_of_memory
from fasttrain.train.setup import batch_math as bm
from fasttrain.train.setup import batch_search as bs

CPU_REPORT = HardwareReport(cpu=CpuInfo(logical_cores=2),
                            memory=MemoryInfo(ram_total_bytes=16 * 2**30, ram_available_bytes=12 * 2**30))


class Thresholded(nn.Module):
    """A small conv net whose forward raises CUDA's OutOfMemoryError when the batch exceeds `limit`,
    the way a GPU does once activations outgrow its memory. Records every batch it really ran."""

    def __init__(self, limit: int, ran: list[int], num_classes: int = 4):
        super().__init__()
        self.limit, self.ran = limit, ran
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(4, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] > self.limit:
            raise torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {x.shape[0]} MiB")
        self.ran.append(x.shape[0])
        return self.net(x)


def cpu_plan(batch: int = 8, accumulation: int = 1, precision: str = "fp32", channels_last: bool = False):
    profile = Profile(loader=LoaderSpec(batch_size=batch, num_workers=0, image_size=16),
                      optim=OptimSpec(accumulation_steps=accumulation))
    profile.speed.precision = precision
    profile.speed.channels_last = channels_last
    return make_plan(profile, CPU_REPORT)


def thresholded_trial(limit: int, ran: list[int], plan=None):
    plan = plan or cpu_plan()
    return bs.step_trial(plan, lambda: Thresholded(limit, ran), image_size=16, num_classes=4)


@pytest.mark.parametrize("limit,start", [(37, 8), (5, 8), (1, 1)])
def test_finds_largest_under_threshold_minus_margin_with_real_steps(limit: int, start: int) -> None:
    ran: list[int] = []
    result = bs.search_largest_batch(thresholded_trial(limit, ran), start=start, max_batch=256)
    assert result.largest_ok == limit
    assert result.smallest_failed == limit + 1
    assert result.batch == max(1, math.floor(limit * (1 - bm.SAFETY_MARGIN)))
    # never reports a size it did not run successfully: the answer is a successful trial, and its step ran
    assert result.batch in result.succeeded
    assert result.batch in ran
    assert all(t.batch <= limit for t in result.trials if t.ok)
    assert all(not t.ok and "OutOfMemoryError" in t.reason for t in result.trials if t.batch > limit)
    assert len(result.tried) == len(set(result.tried)) <= bm.MAX_TRIALS


def test_the_margin_target_is_run_even_when_bisection_did_not_visit_it() -> None:
    tried: list[int] = []

    def fake(n: int) -> bs.Trial:
        tried.append(n)
        return bs.Trial(n, n <= 100)

    result = bs.search_largest_batch(fake, start=64, max_batch=4096)
    assert tried[:3] == [64, 128, 96]              # grow by doubling, then bisect
    # bisection stops within BISECT_TOLERANCE (2% of 100 = 2): the margin removes more than that anyway
    assert result.largest_ok <= 100 < result.smallest_failed <= 102
    assert result.batch == math.floor(result.largest_ok * 0.9) and tried[-1] == result.batch  # run last


def test_large_limits_stay_within_tolerance_and_bounded_trials() -> None:
    result = bs.search_largest_batch(lambda n: bs.Trial(n, n <= 3000), start=1, max_batch=65536)
    assert 3000 * (1 - bm.BISECT_TOLERANCE) <= result.largest_ok <= 3000
    assert result.batch <= 3000 * (1 - bm.SAFETY_MARGIN) and result.batch in result.succeeded
    assert len(result.trials) <= 12 + 8 + 1  # 12 doublings, a few bisections, the margin check


def test_trial_cap_is_respected_and_answer_still_tested() -> None:
    result = bs.search_largest_batch(lambda n: bs.Trial(n, n <= 700), start=1, max_batch=65536, max_trials=6)
    assert len(result.trials) == 6
    assert result.capped_by == "max_trials"
    assert result.batch in result.succeeded


def test_no_oom_below_the_cap_reports_the_cap_that_ran() -> None:
    result = bs.search_largest_batch(lambda n: bs.Trial(n, True), start=16, max_batch=100)
    assert result.capped_by == "max_batch" and result.batch == 100 and result.tried == [16, 32, 64, 100]


def test_batch_one_out_of_memory_is_a_failed_job() -> None:
    with pytest.raises(JobFailed, match="batch of 1"):
        bs.search_largest_batch(lambda n: bs.Trial(n, False, "OutOfMemoryError: x"), start=4)


def test_other_errors_propagate_instead_of_counting_as_oom() -> None:
    def broken() -> nn.Module:
        raise ValueError("bad model")

    with pytest.raises(ValueError):
        bs.step_trial(cpu_plan(), broken, image_size=16, num_classes=4)(2)


def test_oom_classification() -> None:
    assert is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory"))
    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 bytes"))
    assert is_out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate`"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
    assert not is_out_of_memory(ValueError("out of memory"))  # only torch's allocator errors count


def test_trials_use_the_plans_precision_and_memory_format() -> None:
    seen: list[tuple[torch.dtype, bool]] = []

    class Spy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv(x)
            seen.append((y.dtype, x.is_contiguous(memory_format=torch.channels_last)))
            return self.fc(y.mean((2, 3)))

    plan = cpu_plan(precision="bf16-mixed", channels_last=True)
    assert bs.step_trial(plan, Spy, image_size=16, num_classes=4)(4).ok
    assert seen and all(s == (torch.bfloat16, True) for s in seen)
    assert len(seen) == 2  # two full steps: the second runs with the optimizer state allocated


@pytest.mark.parametrize("target,fitting,expected", [
    (64, 16, (16, 4)),      # the laptop note: 64 / 16 = 4
    (256, 100, (86, 3)),    # 3 x 86 = 258: one step of accumulation cannot hit 256 exactly with <= 100
    (64, 300, (64, 1)),     # the profile's batch fits: kept
    (7, 1, (1, 7)),
])
def test_accumulation_keeps_the_effective_batch(target: int, fitting: int, expected: tuple[int, int]) -> None:
    batch, accumulation = bs.batch_and_accumulation(target, fitting)
    assert (batch, accumulation) == expected
    assert batch <= fitting and target <= batch * accumulation < target + accumulation


def test_auto_batch_runs_once_then_hits_the_cache(tmp_path, monkeypatch) -> None:
    ran: list[int] = []
    cache = tmp_path / "batch_cache.json"
    plan = cpu_plan(batch=32, accumulation=2)  # 64 samples per optimizer step
    kwargs = {"num_classes": 4, "path": cache, "max_batch": 256, "model_factory": lambda: Thresholded(20, ran)}
    first = bs.auto_batch(plan, "thresholded", 16, **kwargs)
    batch, accumulation, message = first.batch, first.accumulation, first.message
    assert (batch, accumulation) == (16, 4)  # 18 fits with the margin -> 4 x 16 = 64
    assert "64" in message and "accumulation" in message and "18" in message
    stored = json.loads(cache.read_text())
    (key,) = stored
    assert "thresholded" in key and "16px" in key and "fp32" in key and "cpu" in key and torch.__version__ in key
    assert stored[key]["batch"] == 18 and 18 in stored[key]["succeeded"]

    def must_not_search(*a, **k):
        raise AssertionError("searched again despite the cache")

    monkeypatch.setattr(bs, "search_largest_batch", must_not_search)
    ran.clear()
    again = bs.auto_batch(plan, "thresholded", 16, **kwargs)
    assert (again.batch, again.accumulation) == (16, 4) and again.search.from_cache and "cached" in again.message
    assert ran == []  # no training step ran on the cache hit
    # a different precision is a different key: it must search
    with pytest.raises(AssertionError, match="searched again"):
        bs.auto_batch(cpu_plan(batch=32, accumulation=2, precision="bf16-mixed"), "thresholded", 16, **kwargs)


def test_auto_flags_re_resolve_into_a_plan_with_the_new_batch() -> None:
    from fasttrain.profiles import presets

    res = presets.resolve("cpu", env={}, flags=bs.auto_flags(16, 4))
    plan = make_plan(res.profile, CPU_REPORT)
    assert (plan.batch_size, plan.accumulation_steps, plan.effective_batch) == (16, 4, 64)
    assert res.provenance["loader.batch_size"] == "flag --batch-size auto"


def test_corrupt_cache_is_a_miss(tmp_path) -> None:
    cache = tmp_path / "batch_cache.json"
    cache.write_text("{not json")
    assert bs.cached("k", cache) is None


def test_batch_option_parsing() -> None:
    assert bs.check_batch_option("auto") is None and bs.check_batch_option("64") == 64
    with pytest.raises(UserError, match="--batch-size"):
        bs.check_batch_option("-3")
