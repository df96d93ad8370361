"""A model handed to the Python API as an object, a class or a builder (core/given.py), built where names are built.

The run trains the user's own object, so after `fasttrain.train(net, ...)` the notebook's `net` holds the trained
weights (the last epoch's, as Keras and Lightning leave them). Everything that builds the model before the run (the
memory check and the forecast on the meta device, the tuning trial, the batch search) gets a copy instead, so none of
them touches the user's weights: on the meta device a copy whose tensors are meta tensors (no memory, no copy of the
weights), elsewhere a deep copy. A class or builder function is called like a `module:callable` builder
(num_classes= and image_size= when it takes them), a new model each time, the run's included.

A `module:callable` builder named on the command line is called once per run (built_once): its first model is
kept for the process, built on the CPU even when the first to ask counts it on the meta device (the builder's code
runs on real tensors, once, with the run's seed), and everything before the run gets the same copies as above; the
run takes the model itself, and a later run of the same process builds its own.
"""
from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING

from fasttrain.core import given

if TYPE_CHECKING:
    from torch import nn

_BUILT: dict[tuple[object, ...], nn.Module] = {}  # a builder's model by (spec, classes, image size), until the run
_BUILD_SEED = [0]  # the run's --seed: the builder's random init is the one a seeded run gets (seed_builds)


def build_given(name: str, *, for_run: bool, build: Callable[[Callable[..., object]], nn.Module]) -> nn.Module:
    """The registered object itself (for_run), a copy of it, or what its class or builder builds (`build` calls
    it as models/registry.py calls a module:callable builder)."""
    import torch

    obj = given.model(name)
    if isinstance(obj, torch.nn.Module):
        if for_run:
            return obj
        return _meta_copy(obj) if _building_on_meta() else copy.deepcopy(obj)
    return build(obj)  # type: ignore[arg-type]  # not a Module (returned above): a class or a builder


def _building_on_meta() -> bool:
    """Inside `with torch.device("meta")` (estimate/cost.py counts a model there): new tensors are meta tensors."""
    import torch
    return torch.empty(0).device.type == "meta"


def _meta_copy(model: nn.Module) -> nn.Module:
    """A deep copy whose parameters and buffers are meta tensors of the same shapes: deepcopy takes each from the
    memo instead of copying its storage."""
    import torch

    memo: dict[int, object] = {}
    for tensor in itertools.chain(model.parameters(), model.buffers()):
        meta = tensor.detach().to("meta")
        memo[id(tensor)] = torch.nn.Parameter(meta, requires_grad=tensor.requires_grad) \
            if isinstance(tensor, torch.nn.Parameter) else meta
    return copy.deepcopy(model, memo)


def seed_builds(seed: int) -> None:
    """The seed a builder's first call initialises its weights with (the run's --seed, as if it were seeded)."""
    _BUILD_SEED[0] = seed


def built_once(key: tuple[object, ...], build: Callable[[], nn.Module], *, for_run: bool) -> nn.Module:
    """The model `build` makes, built once for this `key`: the run (for_run) takes the model itself, everyone
    before it a copy (a meta-device copy inside `with torch.device("meta")`)."""
    import torch

    model = _BUILT.get(key)
    if model is None:
        with torch.random.fork_rng(devices=[]), torch.device("cpu"):  # real tensors even under a meta caller
            torch.manual_seed(_BUILD_SEED[0])
            model = build()
        _BUILT[key] = model
    if for_run:
        del _BUILT[key]  # trained from here on: a later run of this process gets a new one
        return model
    return _meta_copy(model) if _building_on_meta() else copy.deepcopy(model)
