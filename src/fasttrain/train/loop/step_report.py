"""Reporting logged steps: device timings read back in bursts, then telemetry and the listeners.

On CUDA the copy and compute of a step are bracketed with CUDA events that complete asynchronously; the
steps since the last logged one wait here (PendingStep) and are read back together, with one sync.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fasttrain.train.events import Listeners, StepEvent


@dataclass
class PendingStep:
    """A step whose device timings are not read yet."""

    fields: dict[str, Any]                  # StepRecord fields; h2d_s and compute_s in seconds
    events: tuple[Any, Any, Any] | None     # CUDA events: copy started, copy done, compute done (None on a CPU)


class StepReporter:
    def __init__(self, telemetry: Any, listeners: Listeners, bad_files: Callable[[], list[str]] | None):
        self.telemetry = telemetry        # telemetry.recorder.Telemetry or None
        self.listeners = listeners
        self.bad_files = bad_files        # skipped unreadable files so far (DataBundle.bad_files) or None
        self._bad_seen = 0

    def flush(self, pending: list[PendingStep]) -> None:
        """Read the device timings of `pending`, record every step, tell the listeners about the last one."""
        if not pending:
            return
        if pending[-1].events is not None:
            pending[-1].events[2].synchronize()  # every earlier event is complete once the last one is
        self._report_bad_files()
        tel = self.telemetry
        rec = None
        for p in pending:
            if p.events is not None:
                start, copied, done = p.events
                p.fields["h2d_s"] = start.elapsed_time(copied) / 1000.0   # elapsed_time is in milliseconds
                p.fields["compute_s"] = copied.elapsed_time(done) / 1000.0
            if tel is not None:
                from fasttrain.telemetry.recorder import StepRecord
                rec = StepRecord(**p.fields)
                tel.record(rec)
        snapshot = tel.snapshot() if tel is not None else {}
        self.listeners.on_step(StepEvent(pending[-1].fields, rec, snapshot))

    def _report_bad_files(self) -> None:
        if self.bad_files is None:
            return
        bad = self.bad_files()
        if len(bad) > self._bad_seen:
            self._bad_seen = len(bad)
            self.listeners.on_message(f"skipped {len(bad)} unreadable image file(s) so far, latest {bad[-1]} "
                                      "(--strict-data stops instead)", level="warning")
