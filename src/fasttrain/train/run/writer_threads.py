"""TensorBoard's writer thread kept quiet on a full disk.

tensorboard's own writer thread re-raises a failed write (a full disk) and Python prints its traceback; while a
run logs, quiet_writer_threads() has such an error recorded by the run log (runlog.py warns once) instead.
"""
from __future__ import annotations

import threading
from collections.abc import Callable

from fasttrain.core.diskspace import disk_write_error


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
