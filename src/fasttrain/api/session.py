"""What one API call changes around itself, and puts back: fasttrain stays offline for the call (as the command
line's root keeps every command), tqdm draws no notebook widgets, and the caller's SIGINT and SIGTERM handlers (a
notebook kernel's own) come back after a run."""
from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def api_call() -> Iterator[None]:
    """The surroundings of one call: offline, no tqdm widgets (before the call imports timm: no TqdmWarning under a
    notebook's first call)."""
    from fasttrain.ui.notebook import tqdm_without_widgets
    tqdm_without_widgets()
    with _offline():
        yield


@contextmanager
def own_signals() -> Iterator[None]:
    """The SIGINT and SIGTERM handlers the caller had (a notebook kernel's own), back after the run: the command
    line's run ends by leaving SIGTERM to the process's end (train/signals/lifecycle.py), a kernel lives on."""
    main = threading.current_thread() is threading.main_thread()
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


# huggingface_hub's switches that stay_offline() turns on, by the environment variable each is read from
_HUB_SWITCHES = {"HF_HUB_OFFLINE": "HF_HUB_OFFLINE", "HF_HUB_DISABLE_TELEMETRY": "HF_HUB_DISABLE_TELEMETRY"}


@contextmanager
def _offline() -> Iterator[None]:
    """fasttrain never downloads (models/registry.py stay_offline, as the command line's root does for every
    command), for the length of the call; then the caller's own settings come back, so a notebook's later
    `timm.create_model(..., pretrained=True)` of its own may download as before."""
    from fasttrain.models.registry import OFFLINE_ENV, stay_offline
    saved = {key: os.environ.get(key) for key in OFFLINE_ENV}
    hub = sys.modules.get("huggingface_hub.constants")
    switches = {attr: getattr(hub, attr) for attr in _HUB_SWITCHES if hasattr(hub, attr)} if hub else {}
    stay_offline()
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        hub = sys.modules.get("huggingface_hub.constants")  # imported by the call, perhaps: read the env again
        for attr, env in _HUB_SWITCHES.items():
            if hub is not None and hasattr(hub, attr):
                setattr(hub, attr, switches.get(attr, (saved.get(env) or "").upper() in ("1", "ON", "YES", "TRUE")))
