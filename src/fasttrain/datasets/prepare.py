"""`fasttrain data prepare`: an ImageFolder tree -> WebDataset tar shards, resized once, resumable, in parallel.

Why WebDataset: a shard is a plain POSIX tar (members <key>.jpg and <key>.cls) that any tool reads, the library is
pure Python and maintained, and sequential reads of a few large files replace millions of small-file opens on a
network file system. Writing goes through webdataset's TarWriter.

Steps: gather the split exactly as `train --seed 0` sees the folder (datasets/image_folder.find_splits), cut
each split into shards of `shard_size` images, and hand the shards to a process pool. Each worker decodes
(JPEGs at reduced DCT size where that still leaves the short side above the target), resizes so the short side
is `scale` x image_size (never up), re-encodes (JPEG q90, PNG for lossless sources; small JPEGs too, which drops
their metadata and progressive coding, cheaper to decode), writes <name>.tar.<pid>.tmp and renames it when
complete, then records the shard's count, sha256 and unreadable files in .prepare/<name>.json. A rerun skips
shards that have both; the manifest is written last. DST holding another data set (a different plan) is refused.
The plan and the destination check are datasets/prepare_plan.py, one shard's writing datasets/shard_writer.py;
this module runs the pool and writes the manifest.
"""
from __future__ import annotations

import json
import os
import queue as queue_mod
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.core.files import write_text_atomic
from fasttrain.datasets.image_folder import VAL_FRACTION
from fasttrain.datasets.prepare_plan import SPLIT_SEED, STATE_DIR, Job, PreparePlan, check_destination, make_plan
from fasttrain.datasets.shard_writer import init_worker, write_shard
from fasttrain.datasets.shards import FORMAT, MANIFEST, manifest_checksum

if TYPE_CHECKING:
    from types import FrameType

    from fasttrain.profiles.schema import DataSpec


@dataclass
class Outcome:
    manifest: dict[str, Any]
    skipped_shards: int          # finished on an earlier run
    written_shards: int
    seconds: float
    already_done: bool = False


# -- the run -------------------------------------------------------------------------------------------------
ProgressFn = Callable[[int, int, int], None]   # (images done, images in all, shards done)


def finished_part(dst: Path, job: Job) -> dict[str, Any] | None:
    part_path = dst / STATE_DIR / f"{job.name}.json"
    if not (dst / job.name).is_file() or not part_path.is_file():
        return None
    try:
        return json.loads(part_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def prepare(src: Path, dst: Path, *, image_size: int, scale: float = 1.15, shard_size: int = 1000,
            workers: int | None = None, progress: ProgressFn | None = None, spec: DataSpec | None = None) -> Outcome:
    """Prepare SRC into DST (see the module docstring); `spec`: a labels table's columns and folder (None: found
    by themselves). Raises KeyboardInterrupt on SIGINT/SIGTERM after stopping the workers; finished shards stay
    and a rerun resumes."""
    started = time.perf_counter()
    return run_plan(make_plan(src, image_size, scale, shard_size, spec), dst, workers=workers, progress=progress,
                    started=started)


def run_plan(plan: PreparePlan, dst: Path, *, workers: int | None = None, progress: ProgressFn | None = None,
             started: float | None = None) -> Outcome:
    started = time.perf_counter() if started is None else started
    state = check_destination(dst, plan)
    if state == "done":
        from fasttrain.datasets.shards import load_manifest

        return Outcome(load_manifest(dst), len(plan.jobs), 0, time.perf_counter() - started, already_done=True)
    (dst / STATE_DIR).mkdir(parents=True, exist_ok=True)
    write_text_atomic(dst / STATE_DIR / "plan.json", json.dumps({"fingerprint": plan.fingerprint,
                                                                 "source": plan.source}))
    for stale in dst.glob("*.tmp"):
        stale.unlink(missing_ok=True)
    parts = {j.name: p for j in plan.jobs if (p := finished_part(dst, j)) is not None}
    pending = [j for j in plan.jobs if j.name not in parts]
    done = sum(len(j.items) for j in plan.jobs if j.name in parts)
    skipped = len(parts)
    if progress is not None:
        progress(done, plan.total, len(parts))
    if pending:
        _run_pool(pending, dst, plan, workers or os.cpu_count() or 1, parts, done, progress)
    manifest = build_manifest(plan, [parts[j.name] for j in plan.jobs])
    write_text_atomic(dst / MANIFEST, json.dumps(manifest, indent=1), durable=True)
    shutil.rmtree(dst / STATE_DIR, ignore_errors=True)
    return Outcome(manifest, skipped, len(pending), time.perf_counter() - started)


def _run_pool(pending: list[Job], dst: Path, plan: PreparePlan, workers: int, parts: dict[str, Any], done: int,
              progress: ProgressFn | None) -> None:
    import multiprocessing as mp

    ctx = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    q = ctx.Queue()
    pool = ctx.Pool(min(workers, len(pending)), initializer=init_worker, initargs=(q,))
    previous = _install_sigterm()
    try:
        results = [pool.apply_async(write_shard, (job, str(dst), plan.short_side)) for job in pending]
        waiting = list(results)
        while waiting:
            try:
                done += q.get(timeout=0.2)
                while True:
                    done += q.get_nowait()
            except queue_mod.Empty:
                pass
            for r in [r for r in waiting if r.ready()]:
                part = r.get()  # re-raises a worker's unexpected error
                parts[part["name"]] = part
                waiting.remove(r)
            if progress is not None:
                progress(done, plan.total, len(parts))
        pool.close()
    finally:
        pool.terminate()
        pool.join()
        _restore_sigterm(previous)


def _install_sigterm() -> Any:
    if threading.current_thread() is not threading.main_thread():
        return None

    def on_term(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt("SIGTERM")
    return signal.signal(signal.SIGTERM, on_term)


def _restore_sigterm(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def build_manifest(plan: PreparePlan, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The manifest from the plan and every shard's record (pure)."""
    splits: dict[str, Any] = {}
    bad = [b for p in parts for b in p["bad"]]
    for split in ("train", "val"):
        mine = [p for p in parts if p["split"] == split]
        per_class = [0] * len(plan.classes)
        bad_paths = {b[0] for p in mine for b in p["bad"]}
        for job in plan.jobs:
            if job.split == split:
                for _, path, label in job.items:
                    if path not in bad_paths:
                        per_class[label] += 1
        splits[split] = {"count": sum(p["count"] for p in mine), "per_class": per_class,
                         "shards": [{"name": p["name"], "count": p["count"], "sha256": p["sha256"]} for p in mine]}
    manifest = {"format": FORMAT, "created_by": "fasttrain data prepare", "source": plan.source,
                "fingerprint": plan.fingerprint, "image_size": plan.image_size, "short_side": plan.short_side,
                "split": {"seed": SPLIT_SEED, "val_fraction": VAL_FRACTION}, "classes": plan.classes,
                "splits": splits, "source_images": plan.total, "bad_files": [{"path": p, "reason": r} for p, r in bad]}
    manifest["checksum"] = manifest_checksum(manifest)
    return manifest
