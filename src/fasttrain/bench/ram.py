"""Host RAM an input pipeline holds: RSS summed over this process and its workers, sampled on a thread, and PSS
(shared pages split between the processes mapping them), read once: what the machine really gives up."""
from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psutil

RAM_SAMPLE_S = 0.1


class RamSampler:
    """Peak RSS summed over this process and its children, sampled on a thread every RAM_SAMPLE_S (cheap:
    /proc/<pid>/statm). PSS needs the kernel to walk every mapping (~20 ms per process with torch loaded), so
    `pss_now()` is read once, after the timed window, while the workers still hold their prefetched batches."""

    def __init__(self, interval_s: float = RAM_SAMPLE_S):
        import psutil

        self.proc = psutil.Process()
        self.interval_s = interval_s
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _procs(self) -> list[psutil.Process]:
        try:
            return [self.proc, *self.proc.children(recursive=True)]
        except Exception:
            return [self.proc]

    def sample(self) -> int:
        rss = 0
        for p in self._procs():
            with contextlib.suppress(Exception):
                rss += p.memory_info().rss
        self.peak_rss = max(self.peak_rss, rss)
        return rss

    def pss_now(self) -> int:
        return sum(pss_of(p) for p in self._procs())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RamSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def pss_of(proc: psutil.Process) -> int:
    """Proportional set size in bytes (shared pages split between the processes mapping them); RSS where the
    kernel has no smaps_rollup."""
    try:
        with open(f"/proc/{proc.pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(proc.memory_info().rss)
    except Exception:
        return 0
