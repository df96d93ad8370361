"""Reporting logged steps: device timings read back in bursts, then telemetry and the listeners.

On CUDA the copy and compute of a step are bracketed with CUDA events that complete asynchronously; the
steps since the last logged one wait here (PendingStep) and are read back together, with one sync.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fasttrain.datasets.bundle import BadFiles
from fasttrain.telemetry.recorder import Telemetry
from fasttrain.telemetry.step_record import StepRecord
from fasttrain.train.loop.events import Listeners, StepEvent
from fasttrain.train.loop.outcome import StepOutcome


@dataclass
class PendingStep:
    """A step whose device timings are not read yet."""

    record: StepRecord                      # h2d_s and compute_s by the wall clock until the events are read
    events: tuple[Any, Any, Any] | None     # torch.cuda.Event: copy started, copy done, compute done (None on a CPU)


def pending_step(out: StepOutcome, epoch: int, index: int, batches: int, data_wait_s: float, *, world: int,
                 read: bool) -> PendingStep:
    """The step's telemetry record. `read` (a logged step): its loss and gradient norm are read back here, the
    one sync of the log interval. `world`: processes stepping in lockstep, so images/s is the whole job's."""
    timing = out.timing
    record = StepRecord(epoch=epoch, step=out.step, batch_index=index, batches_in_epoch=batches,
                        images=out.images * world, data_wait_s=data_wait_s, h2d_s=timing.copy_s,
                        compute_s=timing.compute_s, lr=out.lr, batch_size=out.micro_batch,
                        accumulation_steps=out.accumulation_steps, end_time=timing.end_time,
                        loss=float(out.loss) if read else None,
                        grad_norm=float(out.grad_norm) if read and out.grad_norm is not None else None,
                        amp_scale=float(out.scale_after) if read and out.scale_after is not None else None,
                        skipped=read and out.skipped)
    return PendingStep(record, timing.events)


def _timed(pending: PendingStep) -> StepRecord:
    """The record with the device's own copy and compute times (CUDA events; elapsed_time is in milliseconds)."""
    if pending.events is None:
        return pending.record
    start, copied, done = pending.events
    return replace(pending.record, h2d_s=start.elapsed_time(copied) / 1000.0,
                   compute_s=copied.elapsed_time(done) / 1000.0)


class StepReporter:
    def __init__(self, telemetry: Telemetry | None, listeners: Listeners,
                 bad: BadFiles | None):
        self.telemetry = telemetry
        self.listeners = listeners
        self.bad = bad                    # the data's skipped unreadable files (DataBundle.bad) or None
        self._bad_seen = 0

    def flush(self, pending: list[PendingStep]) -> None:
        """Read the device timings of `pending`, record every step, tell the listeners about the last one."""
        if not pending:
            return
        last = pending[-1]
        if last.events is not None:
            last.events[2].synchronize()  # every earlier event is complete once the last one is
        self._report_bad_files()
        tel = self.telemetry
        records = [_timed(p) for p in pending]
        if tel is not None:
            for record in records:
                tel.record(record)
        self.listeners.on_step(StepEvent(records[-1], tel.snapshot() if tel is not None else None))

    def _report_bad_files(self) -> None:
        if self.bad is None:
            return
        bad = list(self.bad.paths)
        if len(bad) > self._bad_seen:
            self._bad_seen = len(bad)
            self.listeners.on_message(f"skipped {len(bad)} unreadable image file(s) so far, latest {bad[-1]} "
                                      "(--strict-data stops instead)", level="warning")
