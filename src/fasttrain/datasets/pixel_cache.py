"""Decoded pixels saved under the fasttrain cache (`decoded/<key>.npz`), so a later run on the same files skips
the decoding: the key (a hash of every file's path, size and modification time), the atomic write, the read.

A cache that cannot be written (full disk, read-only) only costs the next run its decoding; a damaged or
mismatched file reads as none.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

CACHE_VERSION = 1       # bump when the stored layout changes: it is part of the key
CACHE_SUBDIR = "decoded"


def cache_key(samples: list[tuple[str, int]]) -> str | None:
    """A hash of every file's path, size and modification time, in order; None when a file cannot be stat'ed."""
    digest = hashlib.sha256(f"v{CACHE_VERSION}".encode())
    try:
        for path, _ in samples:
            st = os.stat(path)
            digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    except OSError:
        return None
    return digest.hexdigest()[:24]


def save_pixels(path: Path, pixels: Tensor, sizes: Tensor, bad: dict[int, str]) -> bool:
    """Write the decoded set atomically (a temporary file renamed into place) -> whether it was written. Any
    OSError (full disk, read-only cache) leaves no file behind and only costs the next run its decoding."""
    import tempfile

    import numpy as np

    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            np.savez(f, pixels=pixels.numpy(), sizes=sizes.numpy(),
                     bad=np.array(json.dumps({str(k): v for k, v in bad.items()})))
        os.replace(tmp, path)
        return True
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        return False


def load_pixels(path: Path, count: int) -> tuple[Tensor, Tensor, dict[int, str]] | None:
    """(pixels, sizes, bad) from a saved set of `count` images; None when there is none or it is unreadable."""
    import zipfile

    import numpy as np
    import torch

    try:
        with np.load(path, allow_pickle=False) as saved:
            pixels, sizes = saved["pixels"], saved["sizes"]
            bad = {int(k): str(v) for k, v in json.loads(str(saved["bad"])).items()}
    except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError):  # none yet, or damaged
        return None
    if pixels.dtype != np.uint8 or pixels.ndim != 4 or len(pixels) != count or sizes.shape != (count, 2):
        return None
    return torch.from_numpy(pixels), torch.from_numpy(sizes.astype(np.int32)), bad
