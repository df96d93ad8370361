"""build_loaders: plan settings applied, real worker processes, bad files skipped+counted or strict, seeding."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from image_tree import write_corrupt, write_tree

from fasttrain.core.errors import UserError
from fasttrain.datasets.build import build_datasets
from fasttrain.datasets.loaders import build_loaders
from fasttrain.datasets.sampler import EpochSampler
from fasttrain.plan import Plan
from fasttrain.profiles.schema import AugmentSpec

AUG = AugmentSpec(random_resized_crop_scale=(0.5, 1.0), hflip=0.5, color_jitter=0.2)


def _plan(**kw) -> Plan:
    base = Plan(profile_name="test", device="cpu", device_reason="", precision_requested="fp32", precision="fp32",
                precision_reason="", channels_last=False, compile=False, compile_mode="default", compile_reason="",
                tf32=False, cudnn_benchmark=False, fused_optimizer=False, batch_size=4, accumulation_steps=1,
                world_size=1, effective_batch=4, base_lr=0.1, scaled_lr=0.1, workers_requested=0, workers=0,
                workers_reason="", prefetch_factor=None, pin_memory=False, persistent_workers=False, drop_last=True,
                image_size=16, loader_ram_bytes=0, ram_budget_bytes=0)
    return replace(base, **kw)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    write_tree(tmp_path / "train", {"a": 5, "b": 5})
    write_tree(tmp_path / "val", {"a": 3, "b": 2}, seed=1)
    return tmp_path


def _bundle(root: Path, **kw):
    return build_datasets(str(root), image_size=16, augment=AUG, **kw)


def _epoch(loader) -> tuple[torch.Tensor, torch.Tensor]:
    batches = list(loader)
    return torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])


def test_plan_settings_reach_the_dataloader(tree: Path) -> None:
    bundle = _bundle(tree)
    train, val = build_loaders(bundle, _plan(workers=1, prefetch_factor=3, persistent_workers=True), seed=0)
    dl = train.loader
    assert (dl.batch_size, dl.num_workers, dl.prefetch_factor, dl.persistent_workers, dl.drop_last) == (4, 1, 3, True,
                                                                                                        True)
    assert dl.worker_init_fn is not None
    assert len(train) == 2  # 10 images, batch 4, drop_last
    assert val.loader.drop_last is False and len(val) == 2  # 5 images -> 4 + 1
    assert [y.tolist() for _, y in val] == [[0, 0, 0, 1], [1]]  # file order, no shuffling


def test_worker_process_gives_the_same_batches_as_the_main_process(tree: Path) -> None:
    """Augmentation is seeded per (seed, epoch, index), so the worker count does not change the data."""
    bundle = _bundle(tree)
    in_main, _ = build_loaders(bundle, _plan(workers=0), seed=3, epoch_sampler=EpochSampler(10, seed=3, drop_last=True))
    in_worker, _ = build_loaders(bundle, _plan(workers=1, prefetch_factor=2), seed=3,
                                 epoch_sampler=EpochSampler(10, seed=3, drop_last=True))
    x0, y0 = _epoch(in_main)
    x1, y1 = _epoch(in_worker)
    assert torch.equal(y0, y1) and torch.equal(x0, x1)
    in_main.sampler.set_epoch(1)
    x2, _ = _epoch(in_main)
    assert not torch.equal(x0, x2)  # a new epoch: new order and new crops


def test_main_process_rng_is_left_alone(tree: Path) -> None:
    train, _ = build_loaders(_bundle(tree), _plan(), seed=0)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    list(train)
    assert torch.equal(torch.rand(3), expected)


def test_resumed_loader_yields_the_rest_of_the_epoch(tree: Path) -> None:
    bundle = _bundle(tree)
    full, _ = build_loaders(bundle, _plan(batch_size=2), seed=1)
    full.sampler.set_epoch(1)
    batches = list(full)
    resumed_sampler = EpochSampler(10, seed=1, drop_last=True)
    resumed_sampler.set_epoch(1)
    resumed_sampler.set_start(2 * 2)  # two batches done
    resumed, _ = build_loaders(bundle, _plan(batch_size=2), seed=1, epoch_sampler=resumed_sampler)
    rest = list(resumed)
    assert len(resumed) == 3 and len(rest) == 3
    for (xa, ya), (xb, yb) in zip(batches[2:], rest, strict=True):
        assert torch.equal(xa, xb) and torch.equal(ya, yb)


def test_corrupt_file_is_skipped_and_counted_across_worker_processes(tree: Path) -> None:
    bad = write_corrupt(tree / "train" / "a" / "zz_bad.png")
    bundle = _bundle(tree)
    train, _ = build_loaders(bundle, _plan(workers=1, prefetch_factor=2, drop_last=False), seed=0)
    _, targets = _epoch(train)
    assert len(targets) == 10  # 11 files, one unreadable
    assert bundle.bad_files() == [str(bad)]
    _epoch(train)
    assert bundle.bad_files() == [str(bad)] and bundle.bad.skips == 2


def test_strict_mode_names_the_file(tree: Path) -> None:
    bad = write_corrupt(tree / "train" / "b" / "zz_bad.png")
    bundle = _bundle(tree, strict=True)
    train, _ = build_loaders(bundle, _plan(drop_last=False), seed=0)
    with pytest.raises(UserError) as info:
        _epoch(train)
    assert str(bad) in info.value.lines()[0] and "--strict-data" in info.value.lines()[0]


def test_custom_datasets_use_default_collate() -> None:
    from torch.utils.data import TensorDataset

    from fasttrain.datasets.bundle import DataBundle

    x = torch.randn(12, 5, 3)
    ds = TensorDataset(x, torch.arange(12) % 3)
    bundle = DataBundle(train=ds, val=ds, num_classes=3, class_names=[], kind="custom", source="t", train_size=12)
    train, val = build_loaders(bundle, _plan(batch_size=5), seed=0)
    shapes = [tuple(xb.shape) for xb, _ in train]
    assert shapes == [(5, 5, 3), (5, 5, 3)] and sum(len(y) for _, y in val) == 12


def test_synthetic_has_no_loaders() -> None:
    bundle = build_datasets("synthetic", image_size=16, augment=AUG)
    with pytest.raises(ValueError, match="SyntheticBatches"):
        build_loaders(bundle, _plan(), seed=0)


# A child's threads, one after the other: the fd hand-off race (a resource_sharer `_serve` thread whose peer closed
# the socket), then a real bug; the filter must drop only the first.
# The race as it happens, through the standard library's own serving thread: a hand-off whose peer has gone fails
# in multiprocessing.resource_sharer's `_serve` thread, which catches the error and hands it to sys.excepthook (not
# threading.excepthook: a filter there alone let it through). stop() joins that thread after it has handled the
# request, so the hook has run by then. Then a real bug in an ordinary thread, which must still be reported.
RACE_THEN_BUG = """
import threading
from multiprocessing import resource_sharer
def cut_short(conn, destination_pid):
    raise ConnectionResetError(104, "Connection reset by peer")
ident = resource_sharer._resource_sharer.register(cut_short, lambda: None)
resource_sharer._ResourceSharer.get_connection(ident).close()
resource_sharer.stop()
def other():
    raise ValueError("a real bug")
t = threading.Thread(target=other)
t.start()
t.join()
"""


def test_worker_silences_only_the_fdis_handoff_race() -> None:
    """A loader stopped mid-epoch may close the socket of a batch hand-off in flight; the worker's
    resource_sharer thread must not print that traceback into the user's output, but other thread errors must."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import threading
        from fasttrain.datasets.loaders import start_worker
        start_worker(0)
    """) + RACE_THEN_BUG
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "ConnectionResetError" not in out.stderr
    assert "ValueError: a real bug" in out.stderr


def test_the_main_process_of_a_loader_with_workers_silences_the_race_too_and_keeps_the_previous_hook(
        tree: Path) -> None:
    """Seen on 2026-11-26: the hand-off traceback reached `bench loader`'s output although the workers filter it.
    build_loaders with workers installs the same filter in the main process, in front of the hook already there."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(f"""
        import sys, threading
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        seen = []
        threading.excepthook = lambda args: seen.append(type(args.exc_value).__name__)
        from test_loaders import _bundle, _plan
        from fasttrain.datasets.loaders import build_loaders, quiet_fd_handoff_race
        first = threading.excepthook
        build_loaders(_bundle({str(tree)!r}), _plan(workers=1, prefetch_factor=2), seed=0)
        wrapped = threading.excepthook
        assert wrapped is not first and getattr(wrapped, "fasttrain_fd_filter")
        assert getattr(sys.excepthook, "fasttrain_fd_filter")  # where resource_sharer's thread reports
        hook = sys.excepthook
        quiet_fd_handoff_race()  # once is enough: not wrapped twice
        assert threading.excepthook is wrapped and sys.excepthook is hook
    """) + RACE_THEN_BUG + "print(seen)\n"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "ConnectionResetError" not in out.stderr
    assert out.stdout.strip() == "['ValueError']"


@pytest.mark.parametrize(("thread", "error", "race"), [
    ("Thread-3 (_serve)", ConnectionResetError(104, "Connection reset by peer"), True),
    ("Thread-3 (_serve)", BrokenPipeError(32, "Broken pipe"), True),
    ("Thread-3 (_serve)", EOFError(), True),
    ("Thread-3 (_serve)", ValueError("a real bug"), False),   # the sharer's own bug: still shown
    ("Thread-1 (fetch)", ConnectionResetError(104, "Connection reset by peer"), False),  # not a hand-off
])
def test_only_a_cut_hand_off_in_a_serving_thread_is_the_race(thread: str, error: BaseException, race: bool) -> None:
    from fasttrain.datasets.loaders import is_handoff_race
    assert is_handoff_race(thread, error) is race
