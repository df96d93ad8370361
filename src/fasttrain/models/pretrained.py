"""`--pretrained`: a model's published weights through timm's own hub loading, from the Hugging Face cache, or
downloaded into it when they are not there yet and there is network.

Everything else in fasttrain stays offline: cli.py's root callback calls stay_offline() before anything imports
huggingface_hub (its telemetry, update checks and metadata requests never happen). Only the `--pretrained` load
switches the hub online, for that one call (hub_online), and only after the cache was tried offline; a user who
set HF_HUB_OFFLINE=1 before fasttrain started keeps it offline. No network is one line and exit 2, at once:
huggingface_hub answers a refused connection with the cache's LocalEntryNotFoundError (no retries).
torchvision names download through torch.hub, which has no offline switch: `--pretrained` names the timm model
instead (torchvision_hint).
"""
from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.core.errors import Problem, UserError

if TYPE_CHECKING:
    from torch import nn

# Set before huggingface_hub or timm is imported (cli.py's root callback); OWNER_ENV remembers whether the offline
# switch was the user's own (kept for --pretrained too) or fasttrain's (lifted for a --pretrained download).
OWNER_ENV = "FASTTRAIN_HUB_OFFLINE_BY"
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1",
               OWNER_ENV: "fasttrain"}
_TRUE = ("1", "on", "yes", "true")
# What the hub raises when the file is neither in the cache nor reachable (by class name: their modules moved
# between huggingface_hub versions).
NOT_REACHABLE = ("LocalEntryNotFoundError", "OfflineModeIsEnabled", "ConnectError", "ConnectTimeout",
                 "TimeoutException", "ReadTimeout", "ConnectionError", "NameResolutionError", "MaxRetryError",
                 "ProxyError", "URLError", "gaierror", "FileNotFoundError")


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in _TRUE


def stay_offline() -> None:
    """No network for Hugging Face Hub in this process: its offline switch is read when huggingface_hub is
    imported, so this runs first; if it was imported already, its module-level switches are flipped too."""
    owner = os.environ.get(OWNER_ENV) or ("user" if _truthy(os.environ.get("HF_HUB_OFFLINE")) or
                                          _truthy(os.environ.get("TRANSFORMERS_OFFLINE")) else "fasttrain")
    os.environ.update(OFFLINE_ENV)
    os.environ[OWNER_ENV] = owner
    # Any: a module found by name, so the type checker cannot know its attributes
    constants: Any = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
        constants.HF_HUB_DISABLE_TELEMETRY = True


def user_offline() -> bool:
    """The user asked for offline (HF_HUB_OFFLINE=1 before fasttrain set it): --pretrained does not download."""
    owner = os.environ.get(OWNER_ENV)
    return owner == "user" if owner else _truthy(os.environ.get("HF_HUB_OFFLINE"))


@contextlib.contextmanager
def hub_online() -> Iterator[None]:
    """huggingface_hub online for the block (its requests read constants.HF_HUB_OFFLINE on each call; the
    environment variable for anything imported inside), offline again after it."""
    from huggingface_hub import constants
    saved_env, saved = os.environ.get("HF_HUB_OFFLINE"), constants.HF_HUB_OFFLINE
    os.environ["HF_HUB_OFFLINE"], constants.HF_HUB_OFFLINE = "0", False
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = saved
        if saved_env is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved_env


@functools.lru_cache(maxsize=64)  # the plan, the run, the summary and the checks all ask about the same model
def _pretrained_cfg(name: str) -> Any:
    """timm's pretrained config of `name` (its default tag resolved), or None: not a timm name, or none."""
    try:
        from timm.models import get_pretrained_cfg
        return get_pretrained_cfg(name)
    except Exception:
        return None


def hub_id(name: str) -> str | None:
    """The Hugging Face repository timm loads `name`'s default pretrained weights from (`timm/resnet18.a1_in1k`:
    timm resolves the default tag), or None when they are not on the hub."""
    return getattr(_pretrained_cfg(name), "hf_hub_id", None)


def pretrained_data_config(name: str) -> tuple[tuple[float, ...], tuple[float, ...], int] | None:
    """(mean, std, input size in px) the published weights of `name` were trained with (timm's pretrained
    config), or None when timm has no config for it."""
    cfg = _pretrained_cfg(name)
    try:
        mean, std, size = tuple(map(float, cfg.mean)), tuple(map(float, cfg.std)), int(cfg.input_size[-1])
    except (AttributeError, TypeError, ValueError, IndexError):  # no config, or one without these fields
        return None
    return (mean, std, size) if len(mean) == len(std) == 3 else None


def cache_folder(repo: str | None) -> Path:
    """Where huggingface_hub keeps `repo` (HF_HUB_CACHE/models--timm--resnet18.a1_in1k), or the cache itself."""
    from huggingface_hub import constants
    root = Path(constants.HF_HUB_CACHE)
    return root / ("models--" + repo.replace("/", "--")) if repo else root


def pretrained_source(name: str) -> str:
    """`hf-hub:timm/resnet18.a1_in1k (cache ~/.cache/huggingface/hub/models--timm--resnet18.a1_in1k)`, and
    whether the weights are there yet."""
    repo = hub_id(name)
    if not repo:
        return f"timm's weights for {name}"
    folder = cache_folder(repo)
    there = any(folder.glob("snapshots/*/*.safetensors")) or any(folder.glob("snapshots/*/*.bin"))
    return f"hf-hub:{repo} (cache {folder}{'' if there else '; not there yet: downloaded when the run starts'})"


def timm_pretrained(name: str, num_classes: int, **kwargs: Any) -> nn.Module:
    """timm.create_model(name, pretrained=True): from the cache offline first, then downloaded into it (with the
    hub's own progress bar) unless the user keeps the hub offline; missing weights and no network are one line."""
    import timm
    stay_offline()
    try:
        return timm.create_model(name, pretrained=True, num_classes=num_classes, **kwargs)
    except Exception as exc:
        if not _not_reachable(exc):
            raise _load_failed(name, exc) from None
    repo = hub_id(name)
    if user_offline():
        raise UserError([Problem("--pretrained", f"no weights for {name} in the cache {cache_folder(repo)}, and "
                                 "HF_HUB_OFFLINE=1 keeps the Hugging Face Hub offline", "unset HF_HUB_OFFLINE to "
                                 "download them, or give a local file with --weights FILE")])
    unreachable = _hub_unreachable()
    if unreachable is not None:
        raise _no_network(name, repo, unreachable)
    print(f"fasttrain: downloading {name} weights from the Hugging Face Hub into {cache_folder(repo)}",
          file=sys.stderr, flush=True)
    try:
        with hub_online():
            return timm.create_model(name, pretrained=True, num_classes=num_classes, **kwargs)
    except Exception as exc:
        if _not_reachable(exc):
            raise _no_network(name, repo, _why(exc)) from None
        raise _load_failed(name, exc) from None


def _no_network(name: str, repo: str | None, why: str) -> UserError:
    return UserError([Problem("--pretrained", f"no network to download {name}'s weights ({why}) and none in the "
                              f"cache {cache_folder(repo)}", "give a local file with --weights FILE")])


# Seconds to wait for the hub's TCP handshake before calling the network absent (a dropped SYN waits this long).
CONNECT_TIMEOUT_S = 5
PROXY_ENV = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "HTTP_PROXY", "http_proxy")


def _hub_unreachable() -> str | None:
    """Why the hub's host cannot be reached (no DNS, refused, no route), or None when it answers. Asked once
    before the download: huggingface_hub retries a failed request with back-off (~50 s per file) before it
    gives up. Behind a proxy the host is not asked directly: the hub's own request decides."""
    import socket
    from urllib.parse import urlparse

    from huggingface_hub import constants
    if any(os.environ.get(key) for key in PROXY_ENV):
        return None
    url = urlparse(constants.ENDPOINT)
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((url.hostname or "huggingface.co", port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        return f"{url.hostname}: {_why(exc)}"
    return None


def _not_reachable(exc: BaseException) -> bool:
    """The weights are not in the cache and the hub could not be asked (offline, no connection, no DNS)."""
    seen: BaseException | None = exc
    for _ in range(6):  # the cause chain: timm and the hub wrap the connection error
        if seen is None:
            return False
        if type(seen).__name__ in NOT_REACHABLE:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:120]}" if text else type(exc).__name__


def _load_failed(name: str, exc: BaseException) -> UserError:
    return UserError([Problem("--pretrained", f"{name}'s pretrained weights did not load ({_why(exc)})",
                              "give a local file with --weights FILE, or drop --pretrained")])


def check_pretrained(name: str) -> None:
    """UserError unless `name` is a timm model whose weights timm publishes (the download happens in the run)."""
    if ":" in name:
        raise UserError([Problem("--pretrained", f"{name} is your own builder: it loads its own weights",
                                 "load them in the builder, or give a file with --weights FILE", name)])
    import timm
    if name in timm.list_models():
        if hub_id(name) is None:
            raise UserError([Problem("--pretrained", f"timm publishes no weights for {name} on the Hugging Face "
                                     "Hub", "give a local file with --weights FILE, or drop --pretrained")])
        return
    from fasttrain.models.tiny import BUILTIN
    if name in BUILTIN:
        raise UserError([Problem("--pretrained", f"{name} is a fasttrain model and has no pretrained weights")])
    from torchvision import models as tvm
    if name in tvm.list_models(module=tvm):
        raise torchvision_hint(name)


def torchvision_hint(name: str) -> UserError:
    """torchvision's weights come through torch.hub, which fasttrain keeps off the network: the timm name instead."""
    import timm

    from fasttrain.core.suggest import did_you_mean
    close = did_you_mean(name, timm.list_models())
    return UserError([Problem("--pretrained", f"{name} is a torchvision name; fasttrain loads pretrained weights "
                              "through timm", f"name a timm model with --pretrained ({close or 'e.g. resnet18'}), "
                              "or give torchvision's weights file with --weights FILE")])
