"""`fasttrain data prepare`'s plan: the split exactly as `train --seed 0` sees the folder, cut into shards, with
a fingerprint of the settings and every source file, and the check that DST is new, resumable or already done.
Pure apart from listing and stat'ing the source and reading DST's records."""
from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from fasttrain.core.errors import Problem, UserError
from fasttrain.datasets.shards import FORMAT, MANIFEST

if TYPE_CHECKING:
    from fasttrain.profiles.schema import DataSpec

STATE_DIR = ".prepare"
JPEG_QUALITY = 90
SPLIT_SEED = 0   # train's default seed; with image_folder.VAL_FRACTION, the same validation files as `train --data SRC`


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


def short_side_for(image_size: int, scale: float) -> int:
    return max(image_size, math.ceil(image_size * scale))


def make_plan(src: Path, image_size: int, scale: float, shard_size: int, spec: DataSpec | None = None) -> PreparePlan:
    """The jobs for SRC (an image folder, or a labels table read with `spec`'s columns and folder): its classes and
    split as `train --seed 0` sees it, cut into shards."""
    from fasttrain.datasets.data_source import find_samples
    from fasttrain.datasets.image_folder import VAL_FRACTION

    classes, train, val = find_samples(src, seed=SPLIT_SEED, val_fraction=VAL_FRACTION, spec=spec)
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
