"""Build a model by name: timm, torchvision, fasttrain's own small nets, or `module:callable`.

Always random init: nothing is downloaded at run time. Imports torch lazily (call sites are commands).
"""
from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from fasttrain.core.errors import Problem, UserError
from fasttrain.core.suggest import did_you_mean


def builtin_models() -> dict[str, Callable[..., Any]]:
    """fasttrain's own small nets by name (tiny_cnn, ...): built without timm or torchvision."""
    from fasttrain.models import tiny as tiny_models
    return tiny_models.BUILTIN


def _timm_names() -> list[str]:
    import timm
    return timm.list_models()


def _torchvision_names() -> list[str]:
    from torchvision import models as tvm
    return tvm.list_models(module=tvm)


def load_callable(spec: str, what: str) -> Callable[..., Any]:
    """`package.module:function` -> the function, with the current directory importable like `python -m`."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UserError([Problem(what, "expected module:callable", "e.g. mypkg.nets:build", spec)])
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError([Problem(what, f"cannot import module {module_name!r}: {exc}",
                                 "check the module is on PYTHONPATH or in the current directory")]) from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise UserError([Problem(what, f"{module_name} has no callable {attr!r}",
                                 did_you_mean(attr, [n for n in dir(module) if not n.startswith("_")]))])
    return fn


def create_model(name: str, num_classes: int, pretrained: bool = False, in_chans: int = 3) -> Any:
    """A torch.nn.Module for `name`; bad names are a UserError with close matches."""
    if ":" in name:
        fn = load_callable(name, "--model")
        try:
            return fn(num_classes=num_classes)
        except TypeError:
            return fn()
    builtin = builtin_models()
    if name in builtin:
        if pretrained:
            raise UserError([Problem("--pretrained", f"{name} is a fasttrain model and has no pretrained weights")])
        return builtin[name](num_classes=num_classes, in_chans=in_chans)
    timm_names = _timm_names()
    if name in timm_names:
        import timm
        if pretrained:
            return _timm_pretrained_offline(name, num_classes)
        return timm.create_model(name, pretrained=False, num_classes=num_classes, in_chans=in_chans)
    tv_names = _torchvision_names()
    if name in tv_names:
        if pretrained:
            raise UserError([Problem("--pretrained", f"torchvision weights for {name} would be downloaded",
                                     "nothing is downloaded at run time; train from scratch or use a timm "
                                     "model whose weights are already in the local cache")])
        from torchvision import models as tvm
        return tvm.get_model(name, weights=None, num_classes=num_classes)
    hint = did_you_mean(name, list(builtin) + timm_names + tv_names)
    raise UserError([Problem("--model", f"unknown model {name!r}",
                             hint or "any timm or torchvision name, or module:callable")])


# fasttrain never downloads: set before huggingface_hub or timm is imported (cli.py's root callback).
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_UPDATE_CHECK": "1"}


def stay_offline() -> None:
    """No network for Hugging Face Hub in this process: its offline switch is read when huggingface_hub is
    imported, so this runs first; if it was imported already, its module-level switches are flipped too."""
    os.environ.update(OFFLINE_ENV)
    constants = sys.modules.get("huggingface_hub.constants")
    if constants is not None:
        constants.HF_HUB_OFFLINE = True
        constants.HF_HUB_DISABLE_TELEMETRY = True


def _timm_pretrained_offline(name: str, num_classes: int) -> Any:
    stay_offline()
    import timm
    try:
        return timm.create_model(name, pretrained=True, num_classes=num_classes)
    except Exception as exc:  # noqa: BLE001 - timm raises many kinds when weights are absent
        missing = type(exc).__name__ in ("LocalEntryNotFoundError", "OfflineModeIsEnabled", "FileNotFoundError")
        what = "in the local cache" if missing else f"that load from the local cache ({type(exc).__name__}: {exc})"
        raise UserError([Problem("--pretrained", f"no pretrained weights for {name} {what}; fasttrain never "
                                 "downloads", "fetch them once where there is network (python -c \"import timm; "
                                 f"timm.create_model('{name}', pretrained=True)\") into the Hugging Face cache "
                                 "(HF_HOME), or drop --pretrained")]) from None
