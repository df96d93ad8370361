"""Telemetry: what each training step actually spent its time on, kept cheap enough to leave on.

The training thread calls `record()` once per loader batch. It only writes a few numbers into
fixed-size ring buffers and running sums (O(1), no device sync, no I/O, no torch calls), so it
costs a few microseconds. Everything slow -- NVML (GPU utilisation and power), the CUDA
allocator's memory counters, host RAM from psutil -- is read on a background thread every
`sample_interval_s` seconds. `snapshot()` turns the rolling window plus the latest samples into
a plain dict with stable keys that the dashboard, the verdict and metrics.jsonl all read.

Times are seconds, memory bytes, power watts, utilisation percent (0-100).
torch is never imported here at module import time (the CLI imports this module).
"""
from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

from fasttrain.telemetry.contention import HostReader
from fasttrain.telemetry.readers import GpuReader
from fasttrain.telemetry.stats import epoch_totals, time_split, window_rates
from fasttrain.telemetry.step_record import StepRecord

# Steps kept in the rolling window: ~a few seconds of training at typical step times, enough to
# smooth out one slow batch without hiding a change of regime for long.
DEFAULT_WINDOW = 50


class Telemetry:
    """Rolling per-step timings plus background hardware samples (readers: telemetry_readers.py).

    `clock` is injectable so tests control time; it must be monotonic seconds on the same scale as
    StepRecord.end_time when the loop sets that (time.perf_counter by default).
    `gpu_reader`/`host_reader` replace the real readers (tests, recorded readings).
    """

    def __init__(self, device: str, gpu_index: int = 0, sample_interval_s: float = 1.0, *,
                 window: int = DEFAULT_WINDOW, clock: Callable[[], float] = time.perf_counter,
                 gpu_reader: Any = None, host_reader: Callable[[], dict[str, Any]] | None = None):
        if window < 2:
            raise ValueError("window must hold at least 2 steps to measure a rate")
        self.device = device
        self.sample_interval_s = sample_interval_s
        self._clock = clock
        self._gpu = gpu_reader if gpu_reader is not None else GpuReader(device, gpu_index)
        self._host = host_reader or HostReader()  # host RAM and RSS, the CPU others take (contention.py)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._samples: dict[str, Any] = {}
        self._sample_error: str | None = None
        self._n = window
        # Ring buffers, preallocated: end time of each batch and its parts.
        self._t = [0.0] * window
        self._img = [0] * window
        self._dw = [0.0] * window
        self._h2d = [0.0] * window
        self._comp = [0.0] * window
        self._reset_all()

    # -- lifecycle -----------------------------------------------------------------------------
    def _reset_all(self) -> None:
        self._i = 0          # next slot to write
        self._count = 0      # records in the window (<= window)
        self._seen = 0       # records since start
        self._sum_img = 0
        self._sum_dw = self._sum_h2d = self._sum_comp = 0.0
        self._last: StepRecord | None = None
        self._latest: dict[str, float | None] = {"loss": None, "lr": None, "grad_norm": None, "amp_scale": None}
        self._skipped_total = 0
        self._reset_epoch()

    def _reset_epoch(self) -> None:
        self._ep_batches = 0
        self._ep_images = 0
        self._ep_dw = self._ep_h2d = self._ep_comp = 0.0
        self._ep_t0: float | None = None
        self._ep_t1: float | None = None
        self._ep_loss_sum = 0.0
        self._ep_loss_n = 0
        self._ep_skipped = 0
        self._ep_util_sum = 0.0
        self._ep_util_n = 0
        self._ep_power_sum = 0.0
        self._ep_power_n = 0

    def start(self) -> Telemetry:
        """Start the background sampler (idempotent). Takes one sample right away."""
        if self._thread is not None:
            return self
        self._stop.clear()
        self.sample_now()
        self._thread = threading.Thread(target=self._run, name="fasttrain-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop and join the sampler; safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 2 * self.sample_interval_s))
            self._thread = None
        close = getattr(self._gpu, "close", None)
        if close:
            close()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Telemetry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.sample_interval_s):
            self.sample_now()

    def sample_now(self) -> None:
        try:
            sample = dict(self._host())
            sample.update(self._gpu.read())
            error = None
        except Exception as exc:
            sample, error = {}, f"{exc.__class__.__name__}: {exc}"
        with self._lock:
            self._samples.update(sample)
            self._sample_error = error
            util, power = sample.get("gpu_util_pct"), sample.get("gpu_power_w")
            if self._ep_batches:  # average over the time the epoch was actually training
                if util is not None:
                    self._ep_util_sum += util
                    self._ep_util_n += 1
                if power is not None:
                    self._ep_power_sum += power
                    self._ep_power_n += 1

    def reading(self, key: str) -> Any:
        """The latest background sample's `key` (e.g. "cpu_others_cores"), None before it is measured: one dict
        read, cheap enough between steps."""
        with self._lock:
            return self._samples.get(key)

    def publish(self, key: str, value: Any) -> None:
        """A figure the run decided (the compute threads in use) shown beside the samples in snapshot()."""
        with self._lock:
            self._samples[key] = value

    # -- the training thread's call ------------------------------------------------------------
    def record(self, rec: StepRecord) -> None:
        """O(1): store one batch's timings in the ring buffer and update the running sums."""
        now = rec.end_time if rec.end_time is not None else self._clock()
        with self._lock:
            i = self._i
            if self._count == self._n:  # evict the oldest slot's contribution
                self._sum_img -= self._img[i]
                self._sum_dw -= self._dw[i]
                self._sum_h2d -= self._h2d[i]
                self._sum_comp -= self._comp[i]
            else:
                self._count += 1
            self._t[i] = now
            self._img[i] = rec.images
            self._dw[i] = rec.data_wait_s
            self._h2d[i] = rec.h2d_s
            self._comp[i] = rec.compute_s
            self._sum_img += rec.images
            self._sum_dw += rec.data_wait_s
            self._sum_h2d += rec.h2d_s
            self._sum_comp += rec.compute_s
            self._i = i + 1 if i + 1 < self._n else 0
            if self._i == 0:  # once per window: recompute the sums so float drift cannot build up
                self._sum_dw, self._sum_h2d, self._sum_comp = sum(self._dw), sum(self._h2d), sum(self._comp)
            self._seen += 1
            self._last = rec
            latest = self._latest
            if rec.loss is not None:
                latest["loss"] = rec.loss
                if math.isfinite(rec.loss):
                    self._ep_loss_sum += rec.loss
                    self._ep_loss_n += 1
            if rec.lr is not None:
                latest["lr"] = rec.lr
            if rec.grad_norm is not None:
                latest["grad_norm"] = rec.grad_norm
            if rec.amp_scale is not None:
                latest["amp_scale"] = rec.amp_scale
            if rec.skipped:
                self._skipped_total += 1
                self._ep_skipped += 1
            if self._ep_t0 is None:  # the epoch began when its first batch started waiting for data
                self._ep_t0 = now - (rec.data_wait_s + rec.h2d_s + rec.compute_s)
            self._ep_t1 = now
            self._ep_batches += 1
            self._ep_images += rec.images
            self._ep_dw += rec.data_wait_s
            self._ep_h2d += rec.h2d_s
            self._ep_comp += rec.compute_s

    # -- reading ---------------------------------------------------------------------------------
    def snapshot(self) -> dict[str, Any]:
        """The rolling window as a plain dict (stable keys; None where not measured yet)."""
        with self._lock:
            n, seen, last = self._count, self._seen, self._last
            sums = (self._sum_img, self._sum_dw, self._sum_h2d, self._sum_comp)
            newest = self._t[self._i - 1] if n else 0.0
            oldest_i = (self._i - n) % self._n
            oldest, oldest_img = self._t[oldest_i], self._img[oldest_i]
            samples = dict(self._samples)
            latest = dict(self._latest)
            skipped = self._skipped_total
            sample_error = self._sample_error
        sum_img, sum_dw, sum_h2d, sum_comp = sums
        it_per_s, images_per_s, step_time = window_rates(n, newest - oldest, sum_img, oldest_img,
                                                         sum_dw + sum_h2d + sum_comp)
        return {
            "device": self.device,
            "steps_seen": seen,
            "window_steps": n,
            "epoch": last.epoch if last else None,
            "step": last.step if last else None,
            "batch_index": last.batch_index if last else None,
            "batches_in_epoch": last.batches_in_epoch if last else None,
            "batch_size": last.batch_size if last else None,
            "accumulation_steps": last.accumulation_steps if last else None,
            "it_per_s": it_per_s,
            "images_per_s": images_per_s,
            "step_time_s": step_time,
            "data_wait_s": sum_dw / n if n else None,
            "h2d_s": sum_h2d / n if n else None,
            "compute_s": sum_comp / n if n else None,
            **time_split(sum_dw, sum_h2d, sum_comp),
            "eta_epoch_s": (max(0, last.batches_in_epoch - last.batch_index - 1) * step_time
                            if last is not None and step_time is not None else None),
            "skipped_steps": skipped,
            **latest,
            "gpu_reason": getattr(self._gpu, "reason", None),
            "nvml_reason": getattr(self._gpu, "nvml_reason", None),
            "sample_error": sample_error,
            **samples,
        }

    def epoch_stats(self, reset: bool = True) -> dict[str, Any]:
        """Totals since the last reset (one epoch): batches, images, wall time, images/s, time split, mean loss."""
        with self._lock:
            batches, images = self._ep_batches, self._ep_images
            dw, h2d, comp = self._ep_dw, self._ep_h2d, self._ep_comp
            wall = (self._ep_t1 - self._ep_t0) if self._ep_t0 is not None and self._ep_t1 is not None else 0.0
            loss = self._ep_loss_sum / self._ep_loss_n if self._ep_loss_n else None
            util = self._ep_util_sum / self._ep_util_n if self._ep_util_n else None
            power = self._ep_power_sum / self._ep_power_n if self._ep_power_n else None
            skipped = self._ep_skipped
            peak = self._samples.get("gpu_mem_peak_bytes")
            if reset:
                self._reset_epoch()
        return epoch_totals(batches, images, wall, dw, h2d, comp, train_loss=loss, skipped_steps=skipped,
                            gpu_util_mean_pct=util, gpu_power_mean_w=power, gpu_mem_peak_bytes=peak)

    def reset(self) -> None:
        """Forget everything (window, latest values, epoch totals); the sampler keeps running."""
        with self._lock:
            self._reset_all()
