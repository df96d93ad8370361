"""bench loader: knee and recommendation on recorded sweeps (pure), and a real sweep over a tiny image folder."""
from __future__ import annotations

from pathlib import Path

import pytest

from fasttrain.bench import loader as bl
from fasttrain.bench import loader_choice as bch
from fasttrain.bench import loader_sweep as bsw
from fasttrain.profiles import presets

MIB = 2**20


def point(workers: int, prefetch: int | None, rate: float, ram_mib: float = 10) -> bsw.Point:
    return bsw.Point(workers, prefetch, rate, int(ram_mib * MIB), int(ram_mib * 30 * MIB), 0.1)


# A sweep recorded on this 2-core machine (shapes, batch 64, 32 px): two workers double the rate, a third
# worker only competes with them for the same two cores.
TWO_CORES = [point(0, None, 640, 4), point(1, 2, 655, 17), point(1, 4, 640, 18), point(2, 2, 1010, 32),
             point(2, 4, 990, 34), point(3, 2, 1000, 38), point(3, 4, 960, 45)]


def test_worker_counts_cover_zero_to_the_cores_and_one_step_past() -> None:
    assert bsw.worker_counts(2) == [0, 1, 2, 3]
    assert bsw.worker_counts(1) == [0, 1, 2]
    assert bsw.worker_counts(16) == [0, 1, 2, 3, 4, 6, 9, 14, 16, 24]
    assert bsw.worker_counts(16, max_workers=1) == [0, 1]


def test_sweep_settings_give_zero_workers_no_prefetch() -> None:
    settings = bsw.sweep_settings([0, 1, 2], (2, 4))
    assert [(s.workers, s.prefetch) for s in settings] == [(0, None), (1, 2), (1, 4), (2, 2), (2, 4)]


def test_knee_is_the_fewest_workers_reaching_95_percent_of_the_best() -> None:
    knee = bch.find_knee(TWO_CORES)
    assert (knee.workers, knee.prefetch) == (2, 2)
    flat = [point(0, None, 60), point(1, 2, 97), point(2, 2, 100)]
    assert bch.find_knee(flat).workers == 1  # one worker is within 5% of two


def test_recommendation_respects_the_ram_budget_and_prefers_less_prefetch() -> None:
    choice, why = bch.recommend(TWO_CORES, ram_budget_bytes=1024 * MIB)
    assert (choice.workers, choice.prefetch) == (2, 2) and "95%" in why
    # a budget below two workers' RAM: one worker is the best that fits, and the reason says what was left out;
    # 0 workers deliver as much alone, but load inside the training process (no overlap), so a worker wins
    choice, why = bch.recommend(TWO_CORES, ram_budget_bytes=20 * MIB)
    assert (choice.workers, choice.prefetch) == (1, 2) and "over the" in why and "left out" in why
    # prefetch 4 within 5% of prefetch 2 for the same workers: the smaller buffer wins
    close = [point(0, None, 100), point(1, 2, 300, 10), point(1, 4, 305, 20)]
    assert bch.recommend(close, 1024 * MIB)[0].prefetch == 2
    # nothing fits: the leanest setting, said plainly
    choice, why = bch.recommend(TWO_CORES, ram_budget_bytes=1 * MIB)
    assert choice.workers == 0 and "no setting fits" in why


def test_rounds_combine_to_median_rate_and_max_ram() -> None:
    samples = [{"workers": 1, "prefetch": 2, "images_per_s": r, "ram_bytes": m, "rss_bytes": 5 * m, "startup_s": 0.2}
               for r, m in ((100, 10), (300, 30), (200, 20))]
    (p,) = bsw.combine_rounds(samples)
    assert (p.images_per_s, p.ram_bytes, p.rss_bytes, p.rounds) == (200, 30, 150, 3)


def test_keeping_up_with_the_training_rate() -> None:
    assert bch.keeps_up(1000, 240, cpu_only=False)["keeps_up"] is True
    slow = bch.keeps_up(200, 240, cpu_only=True)
    assert slow["keeps_up"] is False and "input-bound" in slow["message"] and "share the same cores" in slow["message"]
    assert bch.keeps_up(1000, None, cpu_only=True)["keeps_up"] is None
    gpu = bch.keeps_up(1000, 2000, cpu_only=True, source="estimate's forecast for A10G")
    assert gpu["keeps_up"] is False and "forecast for A10G" in gpu["message"] and "share" not in gpu["message"]


def test_no_forecast_for_a_profile_without_a_gpu() -> None:
    assert bl.forecast_rate(presets.resolve("cpu", env={}).profile, "tiny_cnn", num_classes=9,
                            dataset_size=5400) is None


@pytest.mark.parametrize("workers,prefetch", [(2, 4), (0, None)])
def test_written_profile_validates_and_carries_the_choice(tmp_path: Path, workers: int, prefetch: int | None) -> None:
    path = tmp_path / "mine.yaml"
    bl.write_profile(path, "cpu", point(workers, prefetch, 500), "measured by a test\nsecond line")
    text = path.read_text()
    assert text.startswith("# measured by a test\n# second line\nextends: cpu\n")
    prof = presets.resolve(str(path), env={}).profile
    assert prof.loader.num_workers == workers and prof.loader.prefetch_factor == prefetch
    assert prof.loader.batch_size == presets.resolve("cpu", env={}).profile.loader.batch_size  # the rest inherited


def tiny_image_folder(root: Path, classes: int = 2, per_class: int = 10, size: int = 16) -> Path:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, n in (("train", per_class), ("val", 2)):
        for c in range(classes):
            d = root / split / f"class{c}"
            d.mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(d / f"{i}.png")
    return root


def test_real_sweep_over_a_tiny_folder_measures_rate_and_ram(tmp_path: Path) -> None:
    from fasttrain.datasets.build import build_datasets
    from fasttrain.hardware.machine import probe
    from fasttrain.plan import make_plan

    prof = presets.resolve("cpu", env={}, sets=["loader.batch_size=4", "loader.image_size=16"]).profile
    bundle = build_datasets(str(tiny_image_folder(tmp_path / "imgs")), image_size=16, augment=prof.augment)
    plan = make_plan(prof, probe(), dataset_size=bundle.train_size)
    settings = bsw.sweep_settings([0, 1], (2,))
    samples = bl.sweep(bundle, plan, settings, rounds=1, batches=3, max_seconds=5)
    assert [(s["workers"], s["prefetch"]) for s in samples] == [(0, None), (1, 2)]
    for s in samples:
        assert s["images_per_s"] > 0 and s["batches"] == 3 and s["rss_bytes"] > 0
    one_worker = samples[1]
    assert one_worker["rss_bytes"] > samples[0]["rss_bytes"]  # the worker process is counted
    points = bsw.combine_rounds(samples)
    assert bch.recommend(points, plan.ram_budget_bytes)[0] in points


def test_setting_labels_say_worker_or_workers() -> None:
    """`1 workers` read wrong in the sweep table."""
    assert [bsw.Setting(n, p).label for n, p in ((0, None), (1, 2), (4, 4))] == \
        ["0 workers", "1 worker, prefetch 2", "4 workers, prefetch 4"]
