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
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import queue as queue_mod
import shutil
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fasttrain.core.errors import Problem, UserError
from fasttrain.core.files import write_text_atomic
from fasttrain.datasets.shards import FORMAT, MANIFEST, manifest_checksum

SHARD_MTIME = 946684800.0            # 2000-01-01T00:00:00Z on every tar member (reproducible shards)
STATE_DIR = ".prepare"
JPEG_QUALITY = 90
SPLIT_SEED, VAL_FRACTION = 0, 0.1   # train's defaults: the same validation files as `train --data SRC`
PROGRESS_EVERY = 16                 # images between a worker's progress reports


@dataclass
class Job:
    split: str
    name: str
    items: list[tuple[int, str, int]]   # (key index, source path, class index)


@dataclass
class PreparePlan:
    source: str
    classes: list[str]
    jobs: list[Job]
    image_size: int
    short_side: int
    fingerprint: str
    total: int = 0
    counts: dict[str, int] = field(default_factory=dict)


@dataclass
class Outcome:
    manifest: dict[str, Any]
    skipped_shards: int          # finished on an earlier run
    written_shards: int
    seconds: float
    already_done: bool = False


# -- plan (pure apart from listing the source) ---------------------------------------------------------------
def short_side_for(image_size: int, scale: float) -> int:
    return max(image_size, math.ceil(image_size * scale))


def make_plan(src: Path, image_size: int, scale: float, shard_size: int) -> PreparePlan:
    """The jobs for SRC: its split as `train --seed 0` sees it, cut into shards."""
    from fasttrain.datasets.image_folder import find_splits

    classes, train, val = find_splits(src, seed=SPLIT_SEED, val_fraction=VAL_FRACTION)
    return plan_from_splits(src, classes, train, val, image_size=image_size, scale=scale, shard_size=shard_size)


def plan_from_splits(src: Path, classes: list[str], train: list[tuple[str, int]], val: list[tuple[str, int]], *,
                     image_size: int, scale: float, shard_size: int) -> PreparePlan:
    """The jobs for given (path, class) lists; the fingerprint covers the settings and every file's size and mtime."""
    short = short_side_for(image_size, scale)
    jobs: list[Job] = []
    for split, samples in (("train", train), ("val", val)):
        for n, start in enumerate(range(0, len(samples), shard_size)):
            chunk = samples[start:start + shard_size]
            jobs.append(Job(split, f"{split}-{n:06d}.tar", [(start + i, p, c) for i, (p, c) in enumerate(chunk)]))
    h = hashlib.sha256(json.dumps([FORMAT, classes, image_size, short, shard_size, JPEG_QUALITY]).encode())
    for split, samples in (("train", train), ("val", val)):
        for path, label in samples:
            st = os.stat(path)
            h.update(f"{split}|{os.path.relpath(path, src)}|{label}|{st.st_size}|{st.st_mtime_ns}\n".encode())
    return PreparePlan(str(src.resolve()), classes, jobs, image_size, short, h.hexdigest(), len(train) + len(val),
                       {"train": len(train), "val": len(val)})


def check_destination(dst: Path, plan: PreparePlan) -> str:
    """'new' | 'resume' | 'done'; a UserError when DST holds something else."""
    if dst.exists() and not dst.is_dir():
        raise UserError([Problem("--out", f"{dst} is a file", "give a folder (it is created if missing)")])
    if not dst.exists() or not any(dst.iterdir()):
        return "new"
    for path, state in ((dst / MANIFEST, "done"), (dst / STATE_DIR / "plan.json", "resume")):
        if path.is_file():
            try:
                recorded = json.loads(path.read_text(encoding="utf-8")).get("fingerprint")
            except (OSError, ValueError, AttributeError):
                recorded = None
            if recorded != plan.fingerprint:
                raise UserError([Problem("--out", f"{dst} holds a different prepared data set (other source files "
                                         "or settings)", "choose another --out, or delete that folder first")])
            return state
    raise UserError([Problem("--out", f"{dst} is not empty and holds no prepared data set",
                             "give an empty or new folder; nothing there is overwritten")])


# -- one shard (runs in a pool worker) -----------------------------------------------------------------------
_progress_queue: Any = None


def _init_worker(q: Any) -> None:
    global _progress_queue
    _progress_queue = q
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; it terminates the pool
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def encode_one(path: str, short_side: int) -> tuple[bytes, str]:
    """(encoded bytes, extension) of one source image with its short side at most `short_side`."""
    from PIL import Image

    with Image.open(path) as img:
        fmt, (w, h) = img.format, img.size
        if fmt == "JPEG" and min(w, h) >= 2 * short_side:
            img.draft("RGB", (math.ceil(w * short_side / min(w, h)), math.ceil(h * short_side / min(w, h))))
        rgb = img.convert("RGB")
    w, h = rgb.size
    if min(w, h) > short_side:
        k = short_side / min(w, h)
        rgb = rgb.resize((max(short_side, round(w * k)), max(short_side, round(h * k))), Image.BICUBIC,
                         reducing_gap=3.0)
    out = io.BytesIO()
    if fmt == "JPEG":
        rgb.save(out, "JPEG", quality=JPEG_QUALITY)
        return out.getvalue(), "jpg"
    rgb.save(out, "PNG", compress_level=1)
    return out.getvalue(), "png"


def write_shard(job: Job, dst: str, short_side: int) -> dict[str, Any]:
    import webdataset as wds
    from PIL import Image

    final = Path(dst) / job.name
    tmp = final.with_name(f"{job.name}.{os.getpid()}.tmp")
    bad: list[list[str]] = []
    count = since = 0
    # A fixed member mtime: the same source gives byte-identical shards, so a resumed run's manifest and checksum
    # equal an uninterrupted run's (webdataset would stamp the current time).
    with wds.TarWriter(str(tmp), encoder=False, mtime=SHARD_MTIME) as sink:
        for key, path, label in job.items:
            try:
                data, ext = encode_one(path, short_side)
            except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
                bad.append([path, f"{type(exc).__name__}: {exc}"])
            else:
                sink.write({"__key__": f"{key:08d}", ext: data, "cls": str(label).encode()})
                count += 1
            since += 1
            if since >= PROGRESS_EVERY and _progress_queue is not None:
                _progress_queue.put(since)
                since = 0
    if since and _progress_queue is not None:
        _progress_queue.put(since)
    digest = hashlib.sha256()
    with open(tmp, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    part = {"name": job.name, "split": job.split, "count": count, "sha256": digest.hexdigest(), "bad": bad}
    # The record first, then the rename: a shard under its final name is always a finished, recorded one.
    write_text_atomic(Path(dst) / STATE_DIR / f"{job.name}.json", json.dumps(part))
    os.replace(tmp, final)
    return part


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
            workers: int | None = None, progress: ProgressFn | None = None) -> Outcome:
    """Prepare SRC into DST (see the module docstring). Raises KeyboardInterrupt on SIGINT/SIGTERM after
    stopping the workers; finished shards stay and a rerun resumes."""
    started = time.perf_counter()
    return run_plan(make_plan(src, image_size, scale, shard_size), dst, workers=workers, progress=progress,
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
    pool = ctx.Pool(min(workers, len(pending)), initializer=_init_worker, initargs=(q,))
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

    def on_term(signum: int, frame: Any) -> None:
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
