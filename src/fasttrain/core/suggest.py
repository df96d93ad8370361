"""Did-you-mean suggestions, shared by every command that takes a name."""
from __future__ import annotations

import difflib
from collections.abc import Iterable

# Letters typed for the digits they look like: `efficientnet_bo` is efficientnet_b0, not b8 (difflib ties them).
_LOOKALIKE = str.maketrans({"o": "0", "l": "1", "i": "1", "s": "5", "z": "2"})


def close_matches(word: str, choices: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    same_look = [c for c in lowered if c.translate(_LOOKALIKE) == word.lower().translate(_LOOKALIKE)]
    hits = same_look + [h for h in difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=cutoff)
                        if h not in same_look]
    hits = hits[:n]
    # Substring hits help with names like "resnet" -> "resnet18", which difflib ranks low.
    if len(hits) < n:
        for low, _orig in lowered.items():
            if word.lower() in low and low not in hits:
                hits.append(low)
            if len(hits) >= n:
                break
    return [lowered[h] for h in hits]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    hits = close_matches(word, choices)
    return f"did you mean {' or '.join(repr(h) for h in hits)}?" if hits else ""
