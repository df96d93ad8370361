"""Keeping a resumed run's metrics.jsonl in step with its checkpoint.

A process stopped (SIGTERM, SIGKILL) after its last checkpoint has logged rows the resumed run will log again;
truncate_metrics drops them, so metrics.jsonl has each step once and in order. The file is rewritten atomically
(temporary file, fsync, rename): a crash during it leaves the old file whole.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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
