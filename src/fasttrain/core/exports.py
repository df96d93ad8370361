"""Package faces that load their members on first use.

Each subpackage's `__init__.py` names its public face (what other layers and users import) without
importing the modules behind it: `fasttrain.train.Trainer` imports torch only when first read, so
`fasttrain --help` and `import fasttrain.hardware` stay fast (torch alone takes ~2.5 s to import).
This is PEP 562's module `__getattr__`, the mechanism the standard library's own lazy modules use.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

# No `typing` import: every package face loads this module, and `fasttrain train` arms its before-training
# signal handler through one (train/signals/lifecycle.py), within milliseconds of the interpreter's start.


def lazy_face(package: str, members: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]],
                                                                list[str]]:
    """(__getattr__, __dir__, __all__) for `package`, whose public name N lives in submodule members[N]."""

    def __getattr__(name: str) -> object:
        module = members.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)  # later reads skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(members) | set(vars(sys.modules[package])))

    return __getattr__, __dir__, sorted(members)
