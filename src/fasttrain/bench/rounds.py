"""The order of one round of an interleaved benchmark: every bench times its candidates in rounds, and each round
starts one place further on, so no candidate always runs first (cold caches) or last (a warm, busy machine)."""
from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def rotated(items: list[T], round_index: int, step: int = 1) -> list[T]:
    """`items` in round `round_index`'s order: rotated left by `step` places per round. Pure."""
    if not items:
        return []
    shift = (round_index * step) % len(items)
    return items[shift:] + items[:shift]
