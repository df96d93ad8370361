"""Prepared data sets (`fasttrain data prepare`): WebDataset tar shards plus manifest.json, read back map-style.

Layout of DST: manifest.json, train-000000.tar ..., val-000000.tar ... Each tar is a plain WebDataset shard:
members <key>.jpg (or .png for lossless sources) and <key>.cls (the class index as text), any tar tool or
`webdataset.WebDataset` reads it. Here the shards are read by offset (tarfile's member index, then os.pread),
so the same EpochSampler, seeded augmentation and validation walk as for a folder work unchanged.

The manifest keeps the class names in the source's order, the split (the same files `train --seed 0` validates
on), counts per class, each shard's image count and sha256, and one checksum over them all.
"""
from __future__ import annotations

import hashlib
import json
import os
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.core.errors import Problem, UserError
from fasttrain.datasets.fast_decode import EncodedImages
from fasttrain.datasets.transforms import IMAGENET, Norm

if TYPE_CHECKING:
    from fasttrain.datasets.bundle import DataBundle
    from fasttrain.profiles.schema import AugmentSpec

MANIFEST = "manifest.json"
FORMAT = "webdataset"
IMAGE_EXTS = ("jpg", "png")


def is_prepared(path: Path) -> bool:
    return (path / MANIFEST).is_file()


def load_manifest(root: Path) -> dict[str, Any]:
    """The manifest of a prepared set, checked; a UserError with one line when it is not one."""
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError([Problem("--data", f"cannot read {root / MANIFEST}: {exc}",
                                 "prepare it again with fasttrain data prepare")]) from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or "splits" not in manifest:
        raise UserError([Problem("--data", f"{root / MANIFEST} is not a fasttrain prepared data set",
                                 "give the DST folder written by fasttrain data prepare")])
    if manifest.get("checksum") != manifest_checksum(manifest):
        raise UserError([Problem("--data", f"{root / MANIFEST}: checksum does not match its shards' list",
                                 "the manifest was edited or cut short; prepare the data set again")])
    return manifest


def manifest_checksum(manifest: dict[str, Any]) -> str:
    """sha256 over the classes and every shard's name, count and sha256, in split order."""
    h = hashlib.sha256(json.dumps(manifest.get("classes"), ensure_ascii=True).encode())
    for split in ("train", "val"):
        for shard in manifest["splits"].get(split, {}).get("shards", []):
            h.update(f"{split}/{shard['name']}:{shard['count']}:{shard['sha256']}".encode())
    return h.hexdigest()


def index_shard(path: Path) -> list[tuple[str, int, int, int]]:
    """(key, data offset, size, class index) of each image in one tar, in file order."""
    images: dict[str, tuple[int, int]] = {}
    labels: dict[str, int] = {}
    with tarfile.open(path) as tf, open(path, "rb") as raw:
        for member in tf:
            if not member.isfile() or "." not in member.name:
                continue
            key, ext = member.name.split(".", 1)
            if ext in IMAGE_EXTS:
                images[key] = (member.offset_data, member.size)
            elif ext == "cls":
                raw.seek(member.offset_data)
                labels[key] = int(raw.read(member.size).decode().strip())
    return [(k, off, size, labels[k]) for k, (off, size) in images.items() if k in labels]


class ShardImages(EncodedImages):
    """One split of a prepared set, map-style: index -> bytes read by offset from its tar."""

    def __init__(self, root: Path, shards: list[dict[str, Any]], transform: Any):
        from fasttrain.datasets.fast_decode import FastTransform

        self.entries: list[tuple[str, int, int]] = []
        self.samples = []
        for shard in shards:
            path = str(root / shard["name"])
            for key, offset, size, label in index_shard(root / shard["name"]):
                self.entries.append((path, offset, size))
                self.samples.append((f"{shard['name']}:{key}", label))
        self._files: dict[str, int] = {}
        self._pid = os.getpid()
        super().__init__(FastTransform(transform) if transform is not None else None)

    def read(self, index: int) -> bytes:
        path, offset, size = self.entries[index]
        if self._pid != os.getpid():  # a forked worker: open its own descriptors
            self._files, self._pid = {}, os.getpid()
        fd = self._files.get(path)
        if fd is None:
            fd = self._files[path] = os.open(path, os.O_RDONLY)
        return os.pread(fd, size, offset)

    def __getstate__(self) -> dict[str, Any]:  # spawn workers: descriptors do not travel
        state = dict(self.__dict__)
        state["_files"] = {}
        return state


def shard_bundle(root: Path, source: str, image_size: int, augment: AugmentSpec, strict: bool,
                 norm: Norm = IMAGENET) -> DataBundle:
    """The DataBundle of a prepared set: classes and split as the manifest records them."""
    from fasttrain.datasets.bundle import DataBundle
    from fasttrain.datasets.transforms import train_transform, val_transform

    manifest = load_manifest(root)
    missing = [s["name"] for split in ("train", "val") for s in manifest["splits"][split]["shards"]
               if not (root / s["name"]).is_file()]
    if missing:
        raise UserError([Problem("--data", f"{root}: shards missing: {', '.join(missing[:5])}"
                                 + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""),
                                 "rerun fasttrain data prepare with the same source and --out")])
    prepared = manifest["image_size"]
    if image_size > prepared:
        raise UserError([Problem("loader.image_size", f"{image_size} px is larger than the {prepared} px this set "
                                 f"was prepared for ({root})", f"use --image-size {prepared} or less, or prepare "
                                 "it again with a larger --image-size")])
    classes = manifest["classes"]
    try:
        train = ShardImages(root, manifest["splits"]["train"]["shards"], train_transform(augment, image_size, norm))
        val = ShardImages(root, manifest["splits"]["val"]["shards"],
                          val_transform(image_size, augment.val_crop_pct, norm=norm))
    except (tarfile.TarError, OSError, ValueError, KeyError) as exc:  # a shard cut short or overwritten
        first = (str(exc).splitlines() or [""])[0]
        raise UserError([Problem("--data", f"{root}: a shard cannot be read ({type(exc).__name__}: {first})",
                                 "rerun fasttrain data prepare into a new --out")]) from exc
    return DataBundle(train=train, val=val, num_classes=len(classes), class_names=classes, kind="images",
                      source=source, train_size=len(train), val_size=len(val), strict=strict, norm=norm)
