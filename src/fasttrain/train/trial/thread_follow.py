"""Compute threads that follow the cores a CPU run actually gets, during the run (a step hook, after the A/Bs).

Beside another busy process, torch's threads wait at every barrier for a thread the scheduler put aside: two
`fasttrain train` runs started together on 2 cores kept 22% each of one run's images/s (issue 42). So once a
second, between steps, the hook reads how many cores' worth the other processes took (telemetry's host sample,
telemetry/contention.py), lets tuning/thread_share.py decide, and calls torch.set_num_threads (it takes effect at
the next parallel region). Each change is said on the dashboard, published in telemetry's snapshot
("cpu_threads") and kept for summary.json ("thread_changes").

Off where the user fixed the threads (OMP_NUM_THREADS) or turned it off (speed.follow_free_cores: false), under
DDP (the other ranks are other processes: each would give way to the others), and on a GPU.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fasttrain.core.format import plural
from fasttrain.tuning.thread_share import ThreadShare

if TYPE_CHECKING:
    from fasttrain.telemetry.recorder import Telemetry
    from fasttrain.train.types import Prepared

# The test suite's runs share 2 cores with each other, so each would give threads up at moments that depend on
# which other tests run beside it (changing its output and its float sums); tests/conftest.py sets this for every
# test but those about it (tests/test_thread_follow.py).
TEST_FIXED = "FASTTRAIN_TEST_FIXED_THREADS"
READ_EVERY_S = 1.0   # telemetry's host sample comes once a second; reading more often sees the same figure


class FollowFreeCores:
    """A Trainer step hook (never done: it runs for the whole run). `get_threads`/`set_threads`: torch's."""

    done = False

    def __init__(self, cores: int, telemetry: Telemetry, say: Callable[[str], None], *,
                 get_threads: Callable[[], int], set_threads: Callable[[int], None],
                 clock: Callable[[], float] = time.perf_counter, started: float | None = None):
        self.cores, self.telemetry, self.say = cores, telemetry, say
        self.get_threads, self.set_threads, self.clock = get_threads, set_threads, clock
        self.started = clock() if started is None else started
        self.share: ThreadShare | None = None     # built at the first call: the threads the A/Bs left
        self.changes: list[dict[str, Any]] = []   # summary.json's thread_changes
        self._next_read = 0.0

    def __call__(self, batch_index: int) -> None:
        now = self.clock()
        if now < self._next_read:
            return
        self._next_read = now + READ_EVERY_S
        if self.share is None:
            threads = self.get_threads()
            self.share = ThreadShare(threads=threads, ceiling=threads, cores=self.cores)
            self.telemetry.publish("cpu_threads", threads)
            return
        others = self.telemetry.reading("cpu_others_cores")
        before, self.share = self.share, self.share.after(others)
        if self.share.threads != before.threads:
            self._change(before.threads, self.share.threads, float(others), now, batch_index)

    def _change(self, old: int, new: int, others: float, now: float, batch_index: int) -> None:
        self.set_threads(new)
        self.telemetry.publish("cpu_threads", new)
        self.changes.append({"elapsed_s": round(now - self.started, 1), "batch": batch_index, "threads": new,
                             "others_cores": round(others, 2)})
        ceiling = self.share.ceiling if self.share is not None else new
        if new < old:
            self.say(f"threads: other processes use {others:.1f} of the {self.cores} cores: "
                     f"{plural(new, 'compute thread')} instead of {old} until they finish (threads that wait on "
                     "each other lose more than a thread is worth; speed.follow_free_cores: false keeps them)")
        else:
            self.say(f"threads: cores are free again (others use {others:.1f}): back to {new} of {ceiling} compute "
                     "threads")


def wanted(prep: Prepared, env: dict[str, str]) -> bool:
    """On the CPU, alone (no DDP), with more than one core, the threads not fixed by OMP_NUM_THREADS (nor by
    TEST_FIXED, the test suite's) and the profile's speed.follow_free_cores on."""
    return (prep.plan.device == "cpu" and prep.report.cores > 1 and "OMP_NUM_THREADS" not in env
            and prep.resolved.profile.speed.follow_free_cores and TEST_FIXED not in env)


def hook(prep: Prepared, telemetry: Telemetry | None, say: Callable[[str], None]) -> FollowFreeCores | None:
    """The step hook for this run's loop when wanted and telemetry samples the host, else None."""
    import os

    import torch

    if telemetry is None or not wanted(prep, dict(os.environ)):
        return None
    return FollowFreeCores(prep.report.cores, telemetry, say, get_threads=torch.get_num_threads,
                           set_threads=torch.set_num_threads)
