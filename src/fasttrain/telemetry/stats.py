"""The recorder's sums as the numbers every reader uses: rates over the rolling window, the time split, and one
epoch's totals as a dict with stable keys (None where nothing was measured yet). Pure: telemetry/recorder.py
collects under its lock, these functions only divide."""
from __future__ import annotations

from typing import Any


def time_split(data_wait_s: float, h2d_s: float, compute_s: float) -> dict[str, float | None]:
    """The share of each part of a step: data wait, host-to-device, compute (None before any time was spent)."""
    parts = data_wait_s + h2d_s + compute_s
    return {"data_wait_fraction": data_wait_s / parts if parts > 0 else None,
            "h2d_fraction": h2d_s / parts if parts > 0 else None,
            "compute_fraction": compute_s / parts if parts > 0 else None}


def window_rates(n: int, span: float, sum_images: int, oldest_images: int,
                 parts: float) -> tuple[float | None, float | None, float | None]:
    """(iterations/s, images/s, step time) over a window of `n` batches whose end times span `span` seconds.
    n timestamps bound n-1 intervals; the oldest batch finished at the window's start. With one batch so far,
    its measured parts (`parts`: data wait + host-to-device + compute) are all there is to go on."""
    if n >= 2 and span > 0:
        return (n - 1) / span, (sum_images - oldest_images) / span, span / (n - 1)
    if n and parts > 0:
        step_time = parts / n
        return 1.0 / step_time, sum_images / parts, step_time
    return None, None, None


def epoch_totals(batches: int, images: int, wall_s: float, data_wait_s: float, h2d_s: float, compute_s: float, *,
                 train_loss: float | None, skipped_steps: int, gpu_util_mean_pct: float | None,
                 gpu_power_mean_w: float | None, gpu_mem_peak_bytes: int | None) -> dict[str, Any]:
    """One epoch's totals: batches, images, wall time, images/s, time split, mean loss, GPU means and peak."""
    return {
        "batches": batches,
        "images": images,
        "time_s": wall_s,
        "images_per_s": images / wall_s if wall_s > 0 else None,
        "it_per_s": batches / wall_s if wall_s > 0 else None,
        "data_wait_s": data_wait_s,
        "h2d_s": h2d_s,
        "compute_s": compute_s,
        **time_split(data_wait_s, h2d_s, compute_s),
        "train_loss": train_loss,
        "skipped_steps": skipped_steps,
        "gpu_util_mean_pct": gpu_util_mean_pct,
        "gpu_power_mean_w": gpu_power_mean_w,
        "gpu_mem_peak_bytes": gpu_mem_peak_bytes,
    }
