"""The Python heap while the loop runs: the objects that exist when training starts are left out of the
garbage collector's full passes.

Importing torch, timm, pydantic, typer and rich leaves ~400,000 objects that live as long as the process.
CPython's full (generation 2) collection walks all of them: measured 0.19-0.23 s on the 2-core VM, and the first
one fell inside the second training step of every run (0.35 s instead of 0.07 s for resnet18 at 32 px, 2% of a
10 s run to 97% on scikit-learn's digits). `gc.freeze()` moves them to the permanent generation, which the
collector never walks; the loop's own short-lived objects are collected as before. On leaving, they are handed
back (`gc.unfreeze()`), so a notebook that calls `fasttrain.train` keeps its usual collector afterwards.
"""
from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_depth = 0  # a fit inside a fit (a user's callback that trains, the Python API called from a run) freezes once


@contextlib.contextmanager
def long_lived_objects_frozen() -> Iterator[None]:
    """Within: the objects alive on entry are not walked by full collections; on exit they are again. A process
    that froze objects itself (a server that forks workers) is left as it is: unfreezing would undo its freeze."""
    global _depth
    ours = _depth > 0 or gc.get_freeze_count() == 0
    if ours and _depth == 0:
        gc.freeze()
    _depth += 1 if ours else 0
    try:
        yield
    finally:
        _depth -= 1 if ours else 0
        if ours and _depth == 0:
            gc.unfreeze()
