"""One shard of `fasttrain data prepare`, written in a pool worker: each image decoded (JPEGs at reduced DCT size
where that still leaves the short side above the target), resized so its short side is the plan's (never up),
re-encoded, written to <name>.tar.<pid>.tmp with fixed member times, recorded in .prepare/<name>.json, then renamed
into place. Progress goes to the parent through a queue."""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.core.files import write_text_atomic
from fasttrain.datasets.prepare_plan import JPEG_QUALITY, STATE_DIR, Job

if TYPE_CHECKING:
    from multiprocessing.queues import Queue

SHARD_MTIME = 946684800.0            # 2000-01-01T00:00:00Z on every tar member (reproducible shards)
PROGRESS_EVERY = 16                 # images between a worker's progress reports

_progress_queue: Queue[int] | None = None


def init_worker(q: Queue[int]) -> None:
    """Pool initializer: progress goes to `q`; the parent alone decides on SIGINT, SIGTERM ends the worker."""
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
        rgb = rgb.resize((max(short_side, round(w * k)), max(short_side, round(h * k))), Image.Resampling.BICUBIC,
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
