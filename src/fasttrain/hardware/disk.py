"""Free space on a path, and how fast a data set's files can be read from it.

The read test is bounded (at most MAX_FILES files or MAX_SECONDS) so `doctor --data` stays quick on a
million-file data set. Before reading a file we ask the kernel to drop it from the page cache
(posix_fadvise DONTNEED, which needs no root), so a second run does not report RAM speed; file
systems that ignore the hint (some network ones) can still show cached speed, and cold_cache says
only that the hint was given. One reader thread: DataLoader workers read in parallel, so on network
storage (FSx, NFS, GCS fuse) the loader can pull more than this; on a local disk it is close.
"""
from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from fasttrain.hardware.report import DiskInfo

MAX_FILES = 200
MAX_SECONDS = 2.0
CHUNK = 1 << 20  # bytes per read() call
MAX_WALK_ENTRIES = 20_000  # directory entries looked at while searching for sample files


def free_space(path: Path, role: str) -> DiskInfo:
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return DiskInfo(path=str(path), role=role)
    return DiskInfo(path=str(path), role=role, total_bytes=usage.total, free_bytes=usage.free)


def sample_files(root: Path, limit: int = MAX_FILES) -> Iterator[Path]:
    """Regular files under root, spread over sub-directories (one per class folder before a second one)."""
    looked = 0
    dirs: list[Path] = [root]
    pending: list[list[Path]] = []
    while dirs and looked < MAX_WALK_ENTRIES:
        current = dirs.pop(0)
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError:
            continue
        looked += len(entries)
        files = [Path(e.path) for e in entries if e.is_file(follow_symlinks=True) and not e.name.startswith(".")]
        dirs += [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False) and not e.name.startswith(".")]
        if files:
            pending.append(files)
    given = 0
    depth = 0
    while given < limit and any(depth < len(f) for f in pending):
        for files in pending:
            if depth < len(files) and given < limit:
                yield files[depth]
                given += 1
        depth += 1


def _read_file(path: Path) -> tuple[int, bool]:
    """(bytes read, whether the page-cache drop hint was given)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        dropped = False
        if hasattr(os, "posix_fadvise"):
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                dropped = True
            except OSError:
                pass
        total = 0
        while True:
            chunk = os.read(fd, CHUNK)
            if not chunk:
                return total, dropped
            total += len(chunk)
    finally:
        os.close(fd)


def read_throughput(root: Path, max_files: int = MAX_FILES, max_seconds: float = MAX_SECONDS) -> DiskInfo:
    """Free space of the data set's disk plus MB/s (10**6 bytes) and files/s over a bounded sample."""
    info = free_space(root, "data")
    files = n_bytes = 0
    cold = True
    start = time.perf_counter()
    for path in sample_files(root, max_files):
        try:
            got, dropped = _read_file(path)
        except OSError:
            continue
        files += 1
        n_bytes += got
        cold = cold and dropped
        if time.perf_counter() - start >= max_seconds:
            break
    elapsed = time.perf_counter() - start
    if files == 0 or elapsed <= 0:
        return info.model_copy(update={"sample_files": 0})
    return info.model_copy(update={
        "sample_files": files, "sample_bytes": n_bytes, "sample_seconds": round(elapsed, 4),
        "read_mb_per_s": round(n_bytes / elapsed / 1e6, 2), "files_per_s": round(files / elapsed, 1),
        "cold_cache": cold,
    })
