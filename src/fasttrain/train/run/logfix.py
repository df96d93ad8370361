"""Keeping a resumed run's logs in step with its checkpoint, and TensorBoard's writer quiet on a full disk.

truncate_metrics: a process stopped (SIGTERM, SIGKILL) after its last checkpoint has logged rows the resumed run
will log again; they are dropped, so metrics.jsonl has each step once and in order. The file is rewritten
atomically (temporary file, fsync, rename): a crash during it leaves the old file whole.
quiet_writer_threads: tensorboard's own writer thread re-raises a failed write (a full disk) and Python prints
its traceback; while a run logs, such an error is recorded by the run log (it warns once) instead.
"""
from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fasttrain.core.diskspace import disk_write_error
from fasttrain.core.files import write_text_atomic


def _kept(row: Any, epoch: int, batch: int) -> bool:
    """Was `row` logged before a checkpoint at (epoch: 0-based epoch it continues in / epochs done, batch)?"""
    if not isinstance(row, dict):
        return False
    if row.get("kind") == "epoch":
        return not isinstance(row.get("epoch"), int) or row["epoch"] <= epoch  # epoch rows count from 1
    e, i = row.get("epoch"), row.get("batch_index")
    if not isinstance(e, int) or not isinstance(i, int):
        return True
    return (e, i) < (epoch, batch)


def truncate_metrics(path: Path, epoch: int, batch: int) -> int:
    """Keep the rows of metrics.jsonl logged up to a checkpoint at (epoch, batch in epoch); -> rows dropped.
    A torn last line (a process killed mid-write) is dropped too."""
    path = Path(path)
    if not path.is_file():
        return 0
    keep: list[str] = []
    dropped = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                row = json.loads(line)
            except ValueError:
                row = None
            if line.endswith("\n") and _kept(row, epoch, batch):
                keep.append(line)
            elif line.strip():
                dropped += 1
    if not dropped:
        return 0
    write_text_atomic(path, "".join(keep), durable=True)
    return dropped


def quiet_writer_threads() -> Callable[[], None]:
    """Install a threading.excepthook that swallows file-system errors of tensorboard's writer threads (the
    run log reports them once); -> a function that puts the previous hook back."""
    previous = threading.excepthook

    def hook(args: threading.ExceptHookArgs) -> None:
        if type(args.thread).__name__ == "_AsyncWriterThread" and args.exc_value is not None \
                and disk_write_error(args.exc_value):
            return
        previous(args)
    threading.excepthook = hook

    def restore() -> None:
        if threading.excepthook is hook:
            threading.excepthook = previous
    return restore
