"""The files a run keeps, each replaced only once its new version is complete: last.pt (checkpoint.py writes it
atomically), the model files (models/saved.py), epoch_N.pt with --save-every. When they are written is the loop's
choice (train/loop/checkpointing.py). A save that fails for lack of disk keeps the old file and is said once."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fasttrain.core.diskspace import disk_full, disk_write_error
from fasttrain.models import saved
from fasttrain.train.state import checkpoint  # through the module: tests replace checkpoint.save_atomic

BEST_FILE = "best.pt"        # the best weights as an earlier fasttrain kept them (model.safetensors now)


class CheckpointPolicy:
    """The files a run keeps: last.pt (where the run stands: everything a resume needs; none with `keep_last`
    False), the model files (model.safetensors + model.json: the best weights, the run's one copy of them),
    epoch_N.pt every N epochs (`--save-every`, kept). When they are written is the loop's choice
    (train/loop/checkpointing.py). Each replaces its old file only once the new one is complete. A save that fails
    for lack of disk keeps the old file and adds a line to `errors` (the run goes on: losing a checkpoint is better
    than losing the run). `model_meta`: model.json's fields but the epoch's (train/run/export.py)."""

    def __init__(self, directory: Path, every_epochs: int | None = None, *, keep_last: bool = True,
                 model_meta: dict[str, Any] | None = None):
        self.directory = Path(directory)
        self.every_epochs = every_epochs
        self.keep_last = keep_last
        self.model_meta = model_meta
        self.errors: list[str] = []
        self.slow_save_s = checkpoint.test_slow_save_seconds()  # checked here, before training starts

    def _save(self, name: str, write: Callable[[Path], Path]) -> Path | None:
        path = self.directory / name
        try:
            written = write(path)
        except Exception as exc:
            if not disk_write_error(exc):
                raise
            full = disk_full(exc)
            cause = f"the disk is full ({full})" if full else str(exc).splitlines()[0][:200]
            kept = f"the previous {name} is kept" if path.is_file() else f"no {name} was written before"
            self.errors.append(f"could not save checkpoint {path}: {cause}; {kept}")
            return None
        checkpoint.prune_stale_temporaries(self.directory)
        return written

    def save_last(self, payload: dict[str, Any]) -> Path | None:
        if not self.keep_last:
            return None
        return self._save("last.pt", lambda path: checkpoint.save_atomic(payload, path, slow_save_s=self.slow_save_s))

    def save_model(self, weights: dict[str, Any]) -> Path | None:
        """The model files from a weights_payload(); a best.pt of an earlier fasttrain, superseded, is removed."""
        meta = None if self.model_meta is None else {**self.model_meta, "from": weights["from"],
                                                     "epoch": weights["epoch"], "val_acc1": weights["val_acc1"]}
        written = self._save(saved.WEIGHTS_FILE, lambda path: saved.save_trained(path.parent, weights["model"], meta))
        if written is not None:
            (self.directory / BEST_FILE).unlink(missing_ok=True)
        return written

    def numbered_due(self, epoch: int) -> bool:
        """--save-every N asks for epoch_N.pt after epoch `epoch` (0-based)."""
        return bool(self.every_epochs) and (epoch + 1) % (self.every_epochs or 1) == 0

    def save_numbered(self, payload: dict[str, Any], epoch: int) -> Path | None:
        """epoch_N.pt after epoch `epoch` (0-based) when --save-every N asks for it; else None."""
        if not self.numbered_due(epoch):
            return None
        return self._save(f"epoch_{epoch + 1:04d}.pt", lambda path: checkpoint.save_atomic(payload, path,
                                                                                slow_save_s=self.slow_save_s))


def weights_payload(model: dict[str, Any], *, epoch: int, val_acc1: float | None,
                    best: bool = True) -> dict[str, Any]:
    """Weights for the model files (`best`: of the best epoch; else the last, when no epoch was validated); as
    best.pt held them, a file plain `torch.load` (weights_only=True) opens: tensors, numbers and strings."""
    return {"kind": checkpoint.WEIGHTS_KIND, "model": model, "epoch": epoch, "val_acc1": val_acc1,
            "from": "best epoch" if best else "last epoch"}
