"""How numbers read on screen: the one place that turns bytes, seconds and counts into text.

Every command and the dashboard format through these functions, so the same quantity reads the same
everywhere (a GiB is 2**30 bytes, like nvidia-smi and `free -g`; a clock time is h:mm:ss). Pure, no I/O.
"""
from __future__ import annotations

from fasttrain.core.arithmetic import GIB, MIB


def fmt_bytes(n: float | None, missing: str = "?") -> str:
    """GiB above 1 GiB, else MiB: the units nvidia-smi and the field notes use."""
    if n is None:
        return missing
    if abs(n) >= GIB:
        return f"{n / GIB:.1f} GiB"
    return f"{n / MIB:.0f} MiB"


def fmt_clock(seconds: float | None, missing: str = "-") -> str:
    """A running time or an ETA as h:mm:ss (the dashboard's columns keep their width)."""
    if seconds is None:
        return missing
    s = round(seconds)
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


def fmt_duration(seconds: float | None, missing: str = "unknown") -> str:
    """A forecast length in the largest unit that keeps it readable: 0.12 s, 42.0 s, 12.5 min, 3.2 h, 4.1 days
    (under a second, two decimals: a validation pass of 0.04 s is not 0.0 s)."""
    if seconds is None:
        return missing
    if seconds < 1:
        return f"{seconds:.2f} s"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


# Floats from a thousand up read as whole numbers with separators (18,070 img/s, not 1.807e+04); past this
# they are too large for a separated integer to stay readable, and keep the exponent.
SEPARATED_UP_TO = 1e15


def fmt_number(x: float | None, digits: int = 4, missing: str = "-") -> str:
    """Integers, and floats from 1,000 up, with thousands separators; smaller floats to `digits` significant
    digits; booleans as words."""
    if x is None:
        return missing
    if isinstance(x, bool):
        return str(x)
    if isinstance(x, int):
        return f"{x:,}"
    if 1000 <= abs(x) < SEPARATED_UP_TO:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def plural(n: int | float, word: str, many: str | None = None) -> str:
    """`n word` with the word in the plural unless n is 1: "1 worker", "2 workers", "1 warning", "0 warnings"."""
    count = f"{n:,}" if isinstance(n, int) and not isinstance(n, bool) else f"{n:g}"
    return f"{count} {word if n == 1 else (many or word + 's')}"


NAME_WIDTH = 20  # a name on a one-line list (a class's) is cut to this many characters


def short_name(name: object, width: int = NAME_WIDTH) -> str:
    """A name on one line of at most `width` characters (control characters as spaces). Pure."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(name))
    return text if len(text) <= width else text[:max(1, width - 3)] + "..."
