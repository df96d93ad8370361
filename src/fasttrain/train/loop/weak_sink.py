"""A callback held without keeping its object alive: the loop's warning sink, held by what the loop owns.

The Trainer owns its StepEngine and its Checkpointer and hands each its bound `_warn`. Held as it is, that is a
reference cycle (Trainer -> engine -> Trainer._warn -> Trainer) which only a garbage collection frees: until one
ran, every engine stayed alive with its weights, gradients and optimizer state, on a GPU in the caching allocator
(one per tuning-trial candidate; a notebook's next run counted them as used memory). Held weakly, the engine is
freed by reference counting the moment its last owner lets go.
"""
from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable


def weak_sink(sink: Callable[[str], None]) -> Callable[[str], None]:
    """`sink` if it holds nothing that owns the caller (a function, a list's append), else for a bound method a
    callable that holds its object weakly: once the object is gone, a call does nothing (nobody listens)."""
    if not inspect.ismethod(sink):
        return sink
    try:
        method = weakref.WeakMethod(sink)
    except TypeError:  # an object without weak references (__slots__): held as it is
        return sink

    def call(text: str) -> None:
        bound = method()
        if bound is not None:
            bound(text)

    return call
