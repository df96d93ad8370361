"""Recognising a write that failed for lack of space, however it is wrapped.

torch.save reports a full disk as `RuntimeError: [enforce fail at inline_container.cc:...] . unexpected pos ...`
or `PytorchStreamWriter failed writing file ...`, chained (__cause__/__context__) from the OSError(ENOSPC) of
the file object, or with no OSError at all. disk_full() walks the chain for errno ENOSPC, EDQUOT or EFBIG and
matches those messages; disk_write_error() also accepts any other OSError (an I/O error): both are survivable
for the run's own files (a checkpoint, a metrics row, the summary), never for the training itself.
"""
from __future__ import annotations

import errno

SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_TORCH_WRITE_MESSAGES = ("unexpected pos", "pytorchstreamwriter failed writing", "file write failed",
                         "write failed", "no space left")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and all(link is not s for s in seen) and len(seen) < 20:
        seen.append(link)
        link = link.__cause__ or link.__context__
    return seen


def disk_full(exc: BaseException) -> str | None:
    """A short reason ("[Errno 28] No space left on device") when `exc` is a full disk or quota, else None."""
    chain = _chain(exc)
    for e in chain:
        if isinstance(e, OSError) and e.errno in SPACE_ERRNOS:
            return str(e)
    for e in chain:
        text = str(e).lower()
        if isinstance(e, (RuntimeError, OSError)) and any(m in text for m in _TORCH_WRITE_MESSAGES):
            return "no space left on device (" + str(e).splitlines()[0].strip()[:120] + ")"
    return None


def disk_write_error(exc: BaseException) -> bool:
    """A write that failed in the file system (full, quota, I/O error), however torch wrapped it."""
    return disk_full(exc) is not None or any(isinstance(e, OSError) for e in _chain(exc))
