"""Build a model by name: timm, torchvision, fasttrain's own small nets, or `module:callable`.

Random init, or with pretrained=True timm's published weights (models/pretrained.py: the only download).
Imports torch lazily (call sites are commands).
"""
from __future__ import annotations

import functools
import importlib
import inspect
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fasttrain.core.errors import Problem, UserError
from fasttrain.core.given import is_given
from fasttrain.core.suggest import did_you_mean

# Their home is models/pretrained.py; cli.py, api/ and the plan name them here, with the models.
from fasttrain.models.pretrained import OFFLINE_ENV as OFFLINE_ENV
from fasttrain.models.pretrained import pretrained_source as pretrained_source
from fasttrain.models.pretrained import stay_offline as stay_offline

if TYPE_CHECKING:
    from torch import nn


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


_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
_ATTR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def load_callable(spec: str, what: str) -> Callable[..., Any]:
    """`package.module:function` -> the function, with the current directory importable like `python -m`.

    Anything the user's module does on import (raise, SyntaxError, sys.exit) is a UserError naming it.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UserError([Problem(what, "expected module:callable", "e.g. mypkg.nets:build", spec)])
    if not _MODULE_NAME.fullmatch(module_name):
        raise UserError([Problem(what, f"{module_name!r} is not a module name",
                                 "module:callable, e.g. mypkg.nets:build (dotted Python names)", spec)])
    if not _ATTR_NAME.fullmatch(attr):
        raise UserError([Problem(what, f"{attr!r} is not a Python name", "module:callable, e.g. mypkg.nets:build",
                                 spec)])
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError([Problem(what, f"cannot import module {module_name!r}: {_one_line(exc)}",
                                 "check the module is on PYTHONPATH or in the current directory")]) from exc
    except UserError:
        raise
    except (Exception, SystemExit) as exc:
        raise UserError([Problem(what, f"importing module {module_name!r} raised {_describe(exc)}",
                                 "fix the module so that importing it has no error (try `python -c "
                                 f"'import {module_name}'`)")]) from exc
    fn = getattr(module, attr, None)
    if fn is None and not hasattr(module, attr):
        names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n, None))]
        raise UserError([Problem(what, f"{module_name} has no callable {attr!r}",
                                 did_you_mean(attr, names) or "name a function or class of the module")])
    if not callable(fn):
        raise UserError([Problem(what, f"{module_name}.{attr} is not callable (type {type(fn).__name__})",
                                 "name a function or class that builds it")])
    return fn


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _describe(exc: BaseException) -> str:
    """`RuntimeError: boom`, `SystemExit(3)`, `SyntaxError: invalid syntax (bad.py, line 1)`: one line."""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}) (it called sys.exit)"
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300]}" if text else type(exc).__name__


def call_builder(fn: Callable[..., Any], spec: str, num_classes: int, image_size: int | None) -> Any:
    """Call the user's builder with the keywords it takes (num_classes, img_size/image_size)."""
    params: Mapping[str, inspect.Parameter]
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins and some C callables have no signature
        params = {}
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    kwargs: dict[str, Any] = {}
    if "num_classes" in params or var_kw:
        kwargs["num_classes"] = num_classes
    for key in ("image_size", "img_size"):
        if image_size is not None and key in params:
            kwargs[key] = image_size
    try:
        return fn(**kwargs)
    except UserError:
        raise
    except (Exception, SystemExit) as exc:
        raise UserError([Problem("--model", f"{spec}() raised {_describe(exc)}",
                                 "it must build and return a torch.nn.Module (num_classes= is passed when it "
                                 "takes it)")]) from exc


def check_model(model: object, spec: str) -> nn.Module:
    """`model` itself when it is a torch.nn.Module, else a UserError saying what the builder returned."""
    import torch

    if isinstance(model, torch.nn.Module):
        return model
    shown = type(model).__name__ if model is not None else "None"
    raise UserError([Problem("--model", f"{spec}() returned {shown}, not a torch.nn.Module",
                             "return the model itself, e.g. `return MyNet(num_classes)`")])


# More classifier outputs than any real label set (ImageNet-21k: 21,841); beyond it a typo is likelier.
MAX_NUM_CLASSES = 10_000_000


def check_num_classes(num_classes: object, where: str = "--num-classes") -> int:
    """`num_classes` when it is a whole number in 1..MAX_NUM_CLASSES, else a UserError. Pure."""
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or not 1 <= num_classes <= MAX_NUM_CLASSES:
        raise UserError([Problem(where, f"must be a whole number from 1 to {MAX_NUM_CLASSES:,}", "",
                                 num_classes)])
    return num_classes


def create_model(name: str, num_classes: int, pretrained: bool = False, in_chans: int = 3,
                 image_size: int | None = None) -> nn.Module:
    """A torch.nn.Module for `name`; bad names are a UserError with close matches.

    `image_size`: models built for one input size (timm ViTs, Swin: `fixed_input_size`) are built for this
    size instead (timm's img_size=); other models take any size and ignore it.
    """
    if not isinstance(name, str) or not name.strip():
        raise UserError([Problem("--model", "empty model name", "a timm or torchvision name, tiny_cnn, or "
                                 "module:callable", name)])
    check_num_classes(num_classes)
    if is_given(name):  # an object, class or builder handed to the Python API (core/given.py): a copy or a new one
        return _given(name, num_classes, image_size, for_run=False)
    if ":" in name:
        return _built(name, num_classes, image_size, for_run=False)
    builtin = builtin_models()
    if name in builtin:
        if pretrained:
            raise UserError([Problem("--pretrained", f"{name} is a fasttrain model and has no pretrained weights")])
        return builtin[name](num_classes=num_classes, in_chans=in_chans)
    timm_names = _timm_names()
    if name in timm_names:
        import timm
        sized: dict[str, Any] = {"img_size": image_size} if image_size and timm_fixed_size(name) else {}
        if pretrained:  # a ViT's weights load at the run's size too (timm resamples its position embeddings)
            from fasttrain.models.pretrained import timm_pretrained
            return timm_pretrained(name, num_classes, **sized)
        return timm.create_model(name, pretrained=False, num_classes=num_classes, in_chans=in_chans, **sized)
    tv_names = _torchvision_names()
    if name in tv_names:
        if pretrained:
            from fasttrain.models.pretrained import torchvision_hint
            raise torchvision_hint(name)
        from torchvision import models as tvm
        return tvm.get_model(name, weights=None, num_classes=num_classes)
    hint = did_you_mean(name, list(builtin) + timm_names + tv_names)
    raise UserError([Problem("--model", f"unknown model {name!r}",
                             hint or "any timm or torchvision name, or module:callable")])


def run_model(name: str, num_classes: int, *, pretrained: bool = False, image_size: int | None = None) -> nn.Module:
    """The model a run trains: the user's own object when the Python API was handed one, else create_model's."""
    if is_given(name):
        return _given(name, num_classes, image_size, for_run=True)
    if ":" in name:
        return _built(name, num_classes, image_size, for_run=True)
    return create_model(name, num_classes, pretrained=pretrained, image_size=image_size)


def _built(spec: str, num_classes: int, image_size: int | None, *, for_run: bool) -> nn.Module:
    """A module:callable builder's model, called once per run (models/given_model.py built_once)."""
    from fasttrain.models.given_model import built_once
    return built_once((spec, num_classes, image_size), lambda: check_model(
        call_builder(load_callable(spec, "--model"), spec, num_classes, image_size), spec), for_run=for_run)


def builder_folder(spec: str) -> str | None:
    """The folder a module:callable builder's module was imported from (the sys.path entry that holds it), for
    rebuilding the model elsewhere (model.json); None when it is not imported or has no file."""
    module_name = spec.partition(":")[0]
    module = sys.modules.get(module_name)
    file = getattr(module, "__file__", None)
    if not file:
        return None
    path = Path(file).resolve()
    return str(path.parents[module_name.count(".") + (path.name == "__init__.py")])


def _given(name: str, num_classes: int, image_size: int | None, *, for_run: bool) -> nn.Module:
    from fasttrain.models.given_model import build_given
    return build_given(name, for_run=for_run, build=lambda fn: check_model(call_builder(fn, name, num_classes,
                                                                                        image_size), name))


def timm_fixed_size(name: str) -> int | None:
    """The input size a timm model is built for when it takes only that size (ViT, Swin...), else None."""
    try:
        from timm.models import get_pretrained_cfg_value
        if not get_pretrained_cfg_value(name, "fixed_input_size"):
            return None
        size = get_pretrained_cfg_value(name, "input_size")
    except Exception:
        return None
    return int(size[-1]) if size else None


# Sizes tried to tell the user which ones a model takes, when the asked one does not work.
CANDIDATE_SIZES = (32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 384, 448, 512)


def check_model_input(name: str, image_size: int, num_classes: int, in_chans: int = 3) -> None:
    """UserError when model `name` cannot train on `image_size` px images (too small for its downsampling,
    a ViT patch grid that does not fit...), naming the sizes it does take. Runs one forward + backward on the
    meta device: no memory, no compute. module:callable models are the user's own and are not checked.
    Call it once the model name and the image size are known, before any training (estimate, train)."""
    from fasttrain.plan import check_image_size
    check_image_size(image_size)
    if ":" in name:
        return
    error = _input_error(name, image_size, num_classes, in_chans)
    if error is None:
        return
    takes = [s for s in CANDIDATE_SIZES if s != image_size and _input_error(name, s, num_classes, in_chans) is None]
    fixed = timm_fixed_size(name)
    built = f" (built for {fixed} px, rebuilt for the asked size where it can be)" if fixed else ""
    if takes:
        fix = f"{name}{built} takes e.g. {', '.join(str(s) for s in takes[:8])} px"
    else:
        fix = f"{name}{built} took none of {', '.join(str(s) for s in CANDIDATE_SIZES)} px here"
    raise UserError([Problem("--image-size", f"model {name!r} cannot take {image_size} px images: {error}", fix,
                             image_size)])


@functools.lru_cache(maxsize=64)  # a run checks its model in prepare and again when it prices it: once is enough
def _input_error(name: str, image_size: int, num_classes: int, in_chans: int) -> str | None:
    """None when `name` at `image_size` runs forward + backward (batch 2, on meta), else the first error line."""
    import torch

    try:
        with torch.device("meta"):
            model = create_model(name, num_classes=num_classes, in_chans=in_chans, image_size=image_size)
            model.train()
            x = torch.empty(2, in_chans, image_size, image_size)
            out = model(x)
            if isinstance(out, (tuple, list)):
                out = out[0]
            out.float().sum().backward()
    except UserError:
        raise
    except Exception as exc:
        return _one_line(exc)
    return None
