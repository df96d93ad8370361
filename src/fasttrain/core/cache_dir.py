"""The fasttrain cache directory: $FASTTRAIN_CACHE, else ~/.cache/fasttrain.

One answer for every user of the cache (the generated shapes data set, the batch-search results), and one
check that it can really be written, so a bad setting is one exit-2 line naming the path and the fix.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from fasttrain.core.errors import Problem, UserError
from fasttrain.core.paths import expand_user

CACHE_FIX = "set FASTTRAIN_CACHE to a writable directory, e.g. FASTTRAIN_CACHE=/tmp/fasttrain-cache"


def default_cache_dir() -> Path:
    """$FASTTRAIN_CACHE, else ~/.cache/fasttrain; not created or checked (writable_cache_dir does that)."""
    env = os.environ.get("FASTTRAIN_CACHE")
    if env and not env.strip():  # empty means unset; blank is a mistake
        raise UserError([Problem("FASTTRAIN_CACHE", "is blank (only whitespace)", CACHE_FIX, env)])
    if env and "\x00" in env:
        raise UserError([Problem("FASTTRAIN_CACHE", "contains a NUL byte", CACHE_FIX, env)])
    if env:
        return expand_user(env, "FASTTRAIN_CACHE", CACHE_FIX)
    try:
        home = Path.home()
    except (RuntimeError, KeyError) as exc:  # no HOME and no passwd entry
        raise UserError([Problem("FASTTRAIN_CACHE", "not set and there is no home directory to put "
                                 "~/.cache/fasttrain in", CACHE_FIX)]) from exc
    return home / ".cache" / "fasttrain"


def writable_cache_dir(root: Path | None = None) -> Path:
    """The cache directory (default: default_cache_dir()), created, and checked writable by writing a probe
    file; else a UserError naming the path and FASTTRAIN_CACHE. For every user of the cache (shapes set,
    batch search cache), called before anything is written there."""
    root = Path(root) if root is not None else default_cache_dir()
    source = "FASTTRAIN_CACHE" if os.environ.get("FASTTRAIN_CACHE") else "cache directory"
    try:
        if root.exists() and not root.is_dir():
            raise UserError([Problem(source, f"{root} is a file, not a directory", CACHE_FIX, str(root))])
        root.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=root)
        os.close(fd)
        os.unlink(probe)
    except UserError:
        raise
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise UserError([Problem(source, f"cannot create or write the cache directory {root}: {reason}",
                                 CACHE_FIX, str(root))]) from exc
    return root
