"""Writing a file so that a reader never sees half of it.

The text goes to a temporary file in the same folder (`.NAME.XXXX.tmp`, unique per writer), then
os.replace() puts it over the old file in one step (atomic on POSIX within a file system). A failed write
(a full disk, an interrupt) removes the temporary file and leaves the old file whole. `durable=True` also
fsyncs the file before the rename, for files whose loss after a power cut would matter.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text_atomic(path: Path, text: str, *, durable: bool = False) -> Path:
    """Replace `path` with `text` (UTF-8) in one step; -> path."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
