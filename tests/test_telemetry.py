"""Telemetry: rolling-window arithmetic on synthetic steps (injected clock), epoch totals, the sampler thread."""
from __future__ import annotations

import math
import subprocess
import sys
import threading

import pytest

from fasttrain.telemetry.recorder import GpuReader, Telemetry
from fasttrain.telemetry.step_record import StepRecord


class FakeClock:
    """Time that moves only when the test says so: no test depends on the machine's speed."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def rec(i: int, *, images: int = 32, wait: float = 0.06, h2d: float = 0.0, compute: float = 0.04,
        loss: float | None = 1.0, epoch: int = 0, batches: int = 100, **kw: object) -> StepRecord:
    return StepRecord(epoch=epoch, step=i, batch_index=i, batches_in_epoch=batches, images=images,
                      data_wait_s=wait, h2d_s=h2d, compute_s=compute, loss=loss, lr=0.1, batch_size=images, **kw)


def feed(tel: Telemetry, clock: FakeClock, n: int, dt: float, start: int = 0, **kw: object) -> None:
    for i in range(start, start + n):
        clock.now += dt
        tel.record(rec(i, **kw))


def test_rates_and_fractions_from_timestamps() -> None:
    clock = FakeClock()
    tel = Telemetry("cpu", clock=clock, window=10)
    feed(tel, clock, 10, dt=0.125, wait=0.05, h2d=0.025, compute=0.05)
    s = tel.snapshot()
    assert s["it_per_s"] == pytest.approx(8.0)          # 9 intervals over 9 x 0.125 s
    assert s["images_per_s"] == pytest.approx(8.0 * 32)
    assert s["step_time_s"] == pytest.approx(0.125)
    assert s["data_wait_fraction"] == pytest.approx(0.4)
    assert s["h2d_fraction"] == pytest.approx(0.2)
    assert s["compute_fraction"] == pytest.approx(0.4)
    assert s["data_wait_fraction"] + s["h2d_fraction"] + s["compute_fraction"] == pytest.approx(1.0)
    assert s["data_wait_s"] == pytest.approx(0.05)
    assert s["eta_epoch_s"] == pytest.approx((100 - 9 - 1) * 0.125)
    assert (s["steps_seen"], s["window_steps"], s["epoch"], s["batch_index"]) == (10, 10, 0, 9)


def test_batches_recorded_in_a_burst_use_their_own_end_times() -> None:
    """The loop syncs every few steps and records the pending batches together: rates come from end_time."""
    clock = FakeClock()
    tel = Telemetry("cpu", clock=clock, window=20)
    pending = []
    for i in range(10):
        pending.append(rec(i, wait=0.01, compute=0.04, end_time=500.0 + 0.05 * (i + 1)))
    clock.now = 9999.0  # the flush happens much later; its own time must not matter
    for r in pending:
        tel.record(r)
    s = tel.snapshot()
    assert s["it_per_s"] == pytest.approx(20.0) and s["step_time_s"] == pytest.approx(0.05)
    assert tel.epoch_stats()["time_s"] == pytest.approx(0.5)


def test_window_forgets_old_steps() -> None:
    clock = FakeClock()
    tel = Telemetry("cpu", clock=clock, window=5)
    feed(tel, clock, 20, dt=1.0, wait=0.9, compute=0.1)          # slow, input-bound
    feed(tel, clock, 5, dt=0.1, wait=0.0, compute=0.1, start=20)  # then fast, compute only
    s = tel.snapshot()
    assert s["window_steps"] == 5 and s["steps_seen"] == 25
    assert s["it_per_s"] == pytest.approx(10.0)
    assert s["data_wait_fraction"] == pytest.approx(0.0, abs=1e-9)
    assert s["compute_fraction"] == pytest.approx(1.0)


def test_running_sums_stay_exact_over_many_windows() -> None:
    clock = FakeClock()
    tel = Telemetry("cpu", clock=clock, window=7)
    for i in range(1003):  # varying values, many wrap-arounds
        clock.now += 0.01
        tel.record(rec(i, wait=0.001 * (i % 13), h2d=0.0005 * (i % 3), compute=0.01))
    s = tel.snapshot()
    last = range(1003 - 7, 1003)
    waits = [0.001 * (i % 13) for i in last]
    h2ds = [0.0005 * (i % 3) for i in last]
    total = sum(waits) + sum(h2ds) + 0.07
    assert s["data_wait_fraction"] == pytest.approx(sum(waits) / total, rel=1e-9)
    assert s["h2d_fraction"] == pytest.approx(sum(h2ds) / total, rel=1e-9)


def test_single_step_uses_its_measured_parts() -> None:
    clock = FakeClock()
    tel = Telemetry("cpu", clock=clock)
    assert tel.snapshot()["it_per_s"] is None and tel.snapshot()["data_wait_fraction"] is None
    feed(tel, clock, 1, dt=0.2, wait=0.1, compute=0.1, images=10)
    s = tel.snapshot()
    assert s["step_time_s"] == pytest.approx(0.2) and s["images_per_s"] == pytest.approx(50.0)


def test_latest_training_values_survive_steps_without_a_readback() -> None:
    clock = FakeClock()
    tel = Telemetry("cpu", clock=clock)
    clock.now += 0.1
    tel.record(rec(0, loss=2.5, grad_norm=3.0, amp_scale=65536.0))
    clock.now += 0.1
    tel.record(rec(1, loss=None, skipped=True))  # the loop skipped .item() on this batch
    s = tel.snapshot()
    assert (s["loss"], s["grad_norm"], s["amp_scale"], s["lr"]) == (2.5, 3.0, 65536.0, 0.1)
    assert s["skipped_steps"] == 1


def test_epoch_stats_totals_and_reset() -> None:
    clock = FakeClock()
    tel = Telemetry("cpu", clock=clock, window=4)
    feed(tel, clock, 10, dt=0.1, wait=0.02, compute=0.08, loss=1.0)
    clock.now += 0.1
    tel.record(rec(10, wait=0.02, compute=0.08, loss=float("nan")))  # a NaN loss does not poison the mean
    clock.now += 0.1
    tel.record(rec(11, wait=0.02, compute=0.08, loss=3.0))
    ep = tel.epoch_stats()
    assert (ep["batches"], ep["images"]) == (12, 12 * 32)
    assert ep["time_s"] == pytest.approx(1.2)  # from the first batch's start (end - its parts) to the last end
    assert ep["images_per_s"] == pytest.approx(12 * 32 / 1.2)
    assert ep["data_wait_fraction"] == pytest.approx(0.2)
    assert ep["train_loss"] == pytest.approx((10 * 1.0 + 3.0) / 11)
    after = tel.epoch_stats()
    assert after["batches"] == 0 and after["time_s"] == 0.0 and after["train_loss"] is None
    tel.reset()
    assert tel.snapshot()["steps_seen"] == 0 and tel.snapshot()["loss"] is None


def test_record_keeps_fixed_size_buffers() -> None:
    clock = FakeClock()
    tel = Telemetry("cpu", clock=clock, window=8)
    feed(tel, clock, 500, dt=0.01)
    assert tel.snapshot()["window_steps"] == 8
    assert all(len(buf) == 8 for buf in (tel._t, tel._img, tel._dw, tel._h2d, tel._comp))


def test_record_and_snapshot_from_two_threads() -> None:
    tel = Telemetry("cpu", window=16)
    n, threads = 5000, 2
    bad: list[str] = []

    def writer() -> None:
        for i in range(n):
            tel.record(rec(i, wait=0.01, h2d=0.01, compute=0.02))

    def reader(stop: threading.Event) -> None:
        while not stop.is_set():
            s = tel.snapshot()
            if s["data_wait_fraction"] is not None:
                total = s["data_wait_fraction"] + s["h2d_fraction"] + s["compute_fraction"]
                if not math.isclose(total, 1.0, rel_tol=1e-9):
                    bad.append(str(total))

    stop = threading.Event()
    r = threading.Thread(target=reader, args=(stop,))
    r.start()
    ws = [threading.Thread(target=writer) for _ in range(threads)]
    for w in ws:
        w.start()
    for w in ws:
        w.join()
    stop.set()
    r.join()
    assert not bad
    assert tel.snapshot()["steps_seen"] == n * threads
    assert tel.epoch_stats()["batches"] == n * threads


def test_sampler_thread_on_cpu_reads_host_ram_and_says_why_no_gpu() -> None:
    calls = threading.Event()
    count = [0]

    from fasttrain.telemetry.readers import host_sample

    def host() -> dict:
        count[0] += 1
        if count[0] >= 3:
            calls.set()
        return host_sample()

    tel = Telemetry("cpu", sample_interval_s=0.01, host_reader=host)
    tel.start()
    assert tel.running
    assert calls.wait(10), "the sampler thread kept sampling"
    tel.stop()
    assert not tel.running
    tel.stop()  # twice is fine
    s = tel.snapshot()
    assert s["host_ram_total_bytes"] > 0 and 0 < s["host_ram_available_bytes"] <= s["host_ram_total_bytes"]
    assert s["process_rss_bytes"] > 0
    assert "gpu_util_pct" not in s and "gpu_mem_allocated_bytes" not in s
    assert "cpu" in s["gpu_reason"] and s["nvml_reason"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_run_rss_counts_the_loader_worker_processes() -> None:
    import multiprocessing

    import psutil

    from fasttrain.telemetry.readers import tree_rss_bytes

    ctx = multiprocessing.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=lambda: (ready.set(), done.wait(30)))
    child.start()
    try:
        assert ready.wait(30)
        own = psutil.Process().memory_info().rss
        kid = psutil.Process(child.pid).memory_info().rss
        tree = tree_rss_bytes()
        assert tree is not None and tree > own
        assert tree == pytest.approx(own + kid, rel=0.1)
    finally:
        done.set()
        child.join(30)


def test_cuda_device_without_gpu_or_nvml_reports_the_reason() -> None:
    reader = GpuReader("cuda", 0)
    assert reader.read() == {}          # this machine has no GPU and no NVML library
    assert reader.reason                # e.g. "torch sees no CUDA device"
    assert reader.nvml_reason           # e.g. "NVML unavailable: NVMLError_LibraryNotFound: ..."
    reader.close()


class RecordedGpu:
    """Replays GPU readings (the shape GpuReader.read() returns on a CUDA machine)."""

    reason = None
    nvml_reason = None

    def __init__(self, readings: list[dict]) -> None:
        self.readings = readings
        self.i = 0

    def read(self) -> dict:
        out = self.readings[min(self.i, len(self.readings) - 1)]
        self.i += 1
        return out


def test_gpu_readings_reach_the_snapshot_and_epoch_means() -> None:
    clock = FakeClock()
    gpu = RecordedGpu([
        {"gpu_util_pct": 10.0, "gpu_power_w": 60.0, "gpu_mem_allocated_bytes": 5 << 30,
         "gpu_mem_reserved_bytes": 6 << 30, "gpu_mem_peak_bytes": 7 << 30},
        {"gpu_util_pct": 30.0, "gpu_power_w": 100.0, "gpu_mem_allocated_bytes": 5 << 30,
         "gpu_mem_reserved_bytes": 6 << 30, "gpu_mem_peak_bytes": 8 << 30},
    ])
    tel = Telemetry("cuda", clock=clock, gpu_reader=gpu, host_reader=dict)
    feed(tel, clock, 3, dt=0.1)
    tel.sample_now()
    tel.sample_now()
    s = tel.snapshot()
    assert (s["gpu_util_pct"], s["gpu_power_w"], s["gpu_mem_peak_bytes"]) == (30.0, 100.0, 8 << 30)
    ep = tel.epoch_stats()
    assert ep["gpu_util_mean_pct"] == pytest.approx(20.0) and ep["gpu_power_mean_w"] == pytest.approx(80.0)
    assert ep["gpu_mem_peak_bytes"] == 8 << 30


def test_a_failing_reader_never_stops_training() -> None:
    def broken() -> dict:
        raise OSError("proc vanished")

    tel = Telemetry("cpu", host_reader=broken)
    tel.sample_now()
    assert "proc vanished" in tel.snapshot()["sample_error"]


def test_modules_do_not_import_torch() -> None:
    code = (
        "import sys, fasttrain.telemetry.recorder, fasttrain.ui.dashboard, fasttrain.train.run.runlog, "
        "fasttrain.telemetry.verdict; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
