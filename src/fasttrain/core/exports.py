"""Package faces that load their members on first use.

Each subpackage's `__init__.py` names its public face (what other layers and users import) without
importing the modules behind it: `fasttrain.train.Trainer` imports torch only when first read, so
`fasttrain --help` and `import fasttrain.hardware` stay fast (torch alone takes ~2.5 s to import).
This is PEP 562's module `__getattr__`, the mechanism the standard library's own lazy modules use.
"""
from __future__ import annotations

import importlib
import sys
import types
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


class CallableModule(types.ModuleType):
    """A module that can also be called: `fasttrain.train(model, data)` calls the Python API's train() while
    `fasttrain.train` stays the package it is (`from fasttrain.train import prepare` works as before)."""

    def __call__(self, *args: object, **kwargs: object) -> object:
        return _call_target(self)(*args, **kwargs)

    @property
    def __signature__(self) -> object:  # what inspect.signature() and a notebook's `fasttrain.train?` show
        import inspect
        return inspect.signature(_call_target(self))

    @property
    def __doc__(self) -> str | None:  # the function's documentation first, then the module's own
        own = vars(self).get("__doc__")
        return "\n\n".join(d for d in ((_call_target(self).__doc__ or ""), own or "") if d) or None

    @__doc__.setter
    def __doc__(self, value: str | None) -> None:
        vars(self)["__doc__"] = value


_CALLS: dict[str, str] = {}  # "fasttrain.train" -> "fasttrain.api.calls:train"


def _call_target(module: types.ModuleType) -> Callable[..., object]:
    path, _, name = _CALLS[module.__name__].partition(":")
    return getattr(importlib.import_module(path), name)


class _Member:
    """The package's attribute for one callable member: the import system sets it when the member's module is
    imported (that module then becomes a CallableModule), and reading it imports the module when nobody has yet."""

    def __init__(self, name: str, full: str):
        self.name, self.full = name, full

    def __get__(self, package: object, owner: object = None) -> object:
        if package is None:
            return self
        module = vars(package).get(self.name)
        if module is None:
            module = importlib.import_module(self.full)
            self.__set__(package, module)  # in sys.modules already, the import system set nothing
        return module

    def __set__(self, package: object, value: object) -> None:
        if type(value) is types.ModuleType:
            value.__class__ = CallableModule
        vars(package)[self.name] = value

    def __delete__(self, package: object) -> None:
        vars(package).pop(self.name, None)


def callable_members(package: str, calls: Mapping[str, str]) -> None:
    """Make the members of `package` named in `calls` callable, each calling its target ("module:function").

    The package's own face uses this where a name is both a part of the package and a function of its API
    (fasttrain.train, .doctor, .estimate, .plan): the package's module gets a class whose attributes for those
    names turn each member module, when imported, into a CallableModule."""
    module = sys.modules[package]
    for name, target in calls.items():
        _CALLS[f"{package}.{name}"] = target
    namespace = {name: _Member(name, f"{package}.{name}") for name in calls}
    module.__class__ = type("CallableFace", (types.ModuleType,), {"__module__": __name__, **namespace})
    for name in calls:  # members imported before the face was set become callable too
        member = vars(module).get(name) or sys.modules.get(f"{package}.{name}")
        if member is not None:
            setattr(module, name, member)
