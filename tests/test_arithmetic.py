"""The shared arithmetic, checked against the numbers the field notes work out by hand."""
from __future__ import annotations

import pytest

from fasttrain.core import arithmetic as ar
from fasttrain.core.format import fmt_bytes, fmt_duration


def test_lr_scales_linearly_with_total_batch() -> None:
    # optimal-single-gpu-a10g.md / aggressive-a10g-imagenet.md: 0.5 @ 256 -> 0.75 @ 384; 4 GPUs x 256 -> 2.0
    assert ar.scaled_lr(0.5, 256, ar.effective_batch(256, 1, 1)) == pytest.approx(0.5)
    assert ar.scaled_lr(0.5, 256, ar.effective_batch(384, 1, 1)) == pytest.approx(0.75)
    assert ar.scaled_lr(0.5, 256, ar.effective_batch(256, 1, ar.world_size(1, 4))) == pytest.approx(2.0)
    assert ar.scaled_lr(0.5, 256, ar.effective_batch(256, 1, ar.world_size(2, 4))) == pytest.approx(4.0)


def test_effective_batch_multiplies_accumulation_and_world() -> None:
    assert ar.effective_batch(16, 2, 1) == 32  # laptop note: 16 x 2
    assert ar.effective_batch(256, 1, 8) == 2048  # A10G note's 8-GPU row


def test_accumulation_for_target_batch() -> None:
    assert ar.accumulation_for(64, 16) == 4  # laptop note: target 64, max physical 16
    assert ar.accumulation_for(100, 16) == 7  # rounds up: never below the target
    assert ar.accumulation_for(8, 16) == 1
    with pytest.raises(ValueError):
        ar.accumulation_for(64, 0)


def test_iterations_per_epoch_imagenet() -> None:
    assert ar.iterations_per_epoch(1_281_167, 256, 1, drop_last=True) == 5004
    assert ar.iterations_per_epoch(1_281_167, 384, 1, drop_last=True) == 3336  # aggressive note
    assert ar.iterations_per_epoch(1_281_167, 256, 1, drop_last=False) == 5005
    assert ar.iterations_per_epoch(1_281_167, 256, 4, drop_last=True) == 1251
    assert ar.optimizer_steps_per_epoch(5, 2) == 3  # the final partial window still steps


def test_loader_ram_matches_the_a10g_table() -> None:
    raw = ar.batch_bytes(256, 224)
    assert raw == 154_140_672  # the note's 256 x 3 x 224 x 224 x 4
    one = ar.batch_bytes(256, 224, overhead=1.5625)
    gib = ar.GIB
    # Workers x prefetch x ~230 MB: 32 x 8 ~59 GB (OOM), 16 x 4 ~15 GB, 12 x 3 ~8 GB, 8 x 4 ~7 GB
    assert ar.loader_ram_bytes(32, 8, one) / gib == pytest.approx(57.4, abs=0.5)
    assert ar.loader_ram_bytes(16, 4, one) / gib == pytest.approx(14.4, abs=0.5)
    assert ar.loader_ram_bytes(12, 3, one) / gib == pytest.approx(8.1, abs=0.3)
    assert ar.loader_ram_bytes(8, 4, one) / gib == pytest.approx(7.2, abs=0.3)
    assert ar.loader_ram_bytes(0, None, one) == one  # main process holds one batch
    assert ar.loader_ram_bytes(12, 3, one, processes_per_node=4) == 4 * ar.loader_ram_bytes(12, 3, one)


def test_default_workers_and_budget_cap() -> None:
    assert ar.default_workers(16) == 12  # the A10G note's 0.75 x 16
    assert ar.default_workers(2) == 1
    one = ar.batch_bytes(256, 224, overhead=1.5625)
    budget = ar.ram_budget_bytes(62, 0.5)
    fit = ar.workers_within_budget(32, 8, one, budget)
    assert ar.loader_ram_bytes(fit, 8, one) <= budget < ar.loader_ram_bytes(fit + 1, 8, one)
    assert ar.workers_within_budget(4, 2, one, budget_bytes=1) == 0


def test_human_bytes_units() -> None:
    assert fmt_bytes(230 * ar.MIB) == "230 MiB"
    assert fmt_bytes(8.1 * ar.GIB) == "8.1 GiB"


def test_one_duration_format_from_hundredths_to_days() -> None:
    """fmt_duration serves every forecast length, the estimate's validation row among them (it had its own
    two-decimal format for times under a second)."""
    assert fmt_duration(0.044) == "0.04 s"
    assert fmt_duration(0.5) == "0.50 s"
    assert fmt_duration(1.0) == "1.0 s"
    assert fmt_duration(42.04) == "42.0 s"
    assert fmt_duration(750) == "12.5 min"
    assert fmt_duration(3.2 * 3600) == "3.2 h"
    assert fmt_duration(4.1 * 86400) == "4.1 days"
    assert fmt_duration(None) == "unknown"
