"""Did a pass over the data train on anything? An epoch is never a success on files it could not read.

The image loaders skip unreadable files and count them in the bundle's datasets.bundle.BadFiles (`skips` grows
by one per sample lost), which the loop is handed as Collaborators.bad. A training pass that trained no batch at all, or
lost more than half of its samples, stops the
run (JobFailed, exit 1) and says why: how many files could not be read, the latest one and its reason, a
folder that disappeared under the run, and the last good checkpoint. A validation pass that yields no image
is said (a warning), not shown as a silent 0.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from fasttrain.core.errors import JobFailed
from fasttrain.datasets.bundle import BadFiles


def skipped_so_far(bad: BadFiles | None) -> int:
    """Samples the loaders have skipped since the run began (0 for data without skip accounting)."""
    return bad.skips if bad is not None else 0


def latest_bad(bad: BadFiles | None) -> str:
    """'PATH: reason' of the newest unreadable file, plus the folder that is gone when one is; '' if none."""
    if bad is None or not bad.paths:
        return ""
    path, reason = next(reversed(bad.paths.items()))
    gone = vanished_folder(path)
    return f"{path}: {reason}" + (f"; the folder {gone} no longer exists" if gone else "")


def vanished_folder(path: str) -> str:
    """The top-most missing folder above `path` ('' when its folder still exists): data deleted mid-run."""
    p = Path(path).parent
    if p.exists():
        return ""
    while not p.parent.exists() and p.parent != p:
        p = p.parent
    return str(p)


def check_trained(epoch: int, images: int, skipped: int, expected_batches: int, bad: BadFiles | None,
                  last_good: Path | None) -> None:
    """Raise JobFailed when the pass over epoch `epoch` (0-based) trained nothing, or skipped more samples than
    it trained. images/skipped: over the whole job; expected_batches: batches this pass should have had."""
    if expected_batches <= 0 or (images > 0 and skipped <= images):
        return
    saved = f"the last good checkpoint is {last_good}" if last_good else "no checkpoint was written"
    if skipped == 0:
        raise JobFailed(f"epoch {epoch + 1}: the data loader gave no training batch: nothing was trained; "
                        f"check --data ({saved})")
    latest = latest_bad(bad)
    what = "nothing was trained" if images == 0 else f"only {images} trained"
    raise JobFailed(f"epoch {epoch + 1}: {skipped} of {skipped + images} files could not be read"
                    f"{f' (latest: {latest})' if latest else ''}: {what}; check --data ({saved})")


def validation_note(epoch: int, row: dict[str, Any], skipped: int, bad: BadFiles | None) -> str | None:
    """A warning when validation gave no image (else None): no val loss or accuracy this epoch, and why."""
    if row.get("val_images"):
        return None
    why = f"{skipped} file(s) could not be read (latest: {latest_bad(bad)})" if skipped else "it gave no batch"
    return (f"validation in epoch {epoch + 1} saw no image: {why}; no val loss or accuracy for this epoch "
            "(check the val/ folder of --data)")
