"""Model cost on the META device: parameters, FLOPs, per-op memory traffic and activation bytes.

No weights are allocated and no arithmetic runs: every tensor is shape-only, so a ResNet-50 forward and
backward at any batch costs a fraction of a second. Two passes at two batch sizes split every quantity into
a per-sample part and a fixed part (weights), so the forecast can re-price any batch without recounting.

Units: FLOPs are floating-point operations (a multiply-add counts 2, as torch.utils.flop_counter does);
bytes are bytes. Imports torch lazily: only `estimate` and the benchmarks call this module.
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from fasttrain.core.errors import Problem, UserError

if TYPE_CHECKING:
    from torch import nn

# Batches of the two meta passes: 2, not 1, because BatchNorm refuses one value per channel in training mode.
PROBE_BATCHES = (2, 4)
MIXED_DTYPES = {"fp16-mixed": "float16", "bf16-mixed": "bfloat16"}


@dataclass(frozen=True)
class OpCost:
    """One aten call of a training step, per sample plus a fixed part. Units: FLOPs and bytes."""

    name: str
    flops_per_sample: float
    bytes_per_sample: float   # activation traffic: inputs read + outputs written that grow with the batch
    fixed_bytes: float        # weights and other batch-independent tensors the op touches
    depthwise: bool = False   # depthwise convolutions (1 channel per group) run far below the matmul peak


@dataclass
class ModelCost:
    model: str
    image_size: int
    num_classes: int
    dtype: str                      # activation dtype the cost was counted in
    params: int
    param_bytes: int                # at fp32 (master weights)
    forward_flops_per_sample: float
    train_flops_per_sample: float   # forward + backward as counted (close to 3 x forward)
    activation_bytes_per_sample: float  # saved for backward, deduplicated by storage
    activation_bytes_by_dtype: dict[str, float] = field(default_factory=dict)  # per sample
    ops: list[OpCost] = field(default_factory=list)
    forward_ops: int | None = None  # the first this many of `ops` are the forward pass (validation's cost)

    def summary(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("ops")
        out["ops_counted"] = len(self.ops)
        out["train_to_forward_ratio"] = self.train_flops_per_sample / max(self.forward_flops_per_sample, 1.0)
        return out


def build_model(name: str, num_classes: int, image_size: int | None = None) -> nn.Module:
    """The model on the meta device. torchvision names skip the timm import (saves seconds at the CLI)."""
    import torch

    from fasttrain.models import registry as models
    with torch.device("meta"):
        if ":" not in name and name not in models.builtin_models():
            tv = _torchvision_names()
            if name in tv:
                from torchvision import models as tvm
                return tvm.get_model(name, weights=None, num_classes=num_classes)
        return models.create_model(name, num_classes=num_classes, image_size=image_size)


@functools.lru_cache(maxsize=1)
def _torchvision_names() -> frozenset[str]:
    from torchvision import models as tvm
    return frozenset(tvm.list_models(module=tvm))


def _is_alias_op(func: Any) -> bool:
    """Views, reshapes and detaches move no bytes."""
    returns = func._schema.returns  # torch exposes an op's alias annotations only on its private schema
    return bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write for r in returns)


def _tensors(tree: Any) -> list[Any]:
    import torch
    from torch.utils._pytree import tree_flatten  # torch's own pytree: what dispatch modes use for args
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _make_recorder() -> Any:
    """The class of a dispatch mode (defined here: torch is imported only when counting) that records (op, flops,
    batch-scaled bytes, fixed bytes) for every aten call."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode  # the documented base of dispatch modes
    from torch.utils.flop_counter import flop_registry

    class Recorder(TorchDispatchMode):
        def __init__(self, fixed_storages: set[int]) -> None:
            super().__init__()
            self.fixed = fixed_storages
            self.records: list[tuple[str, float, float, float, bool]] = []

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                               kwargs: dict[str, Any] | None = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            packet = func._overloadpacket  # flop_registry is keyed by overload packet; torch has no public name
            if _is_alias_op(func):
                return out
            flops = 0.0
            if packet is torch.ops.aten.convolution_backward and _groups(args) > 1:
                flops = _grouped_conv_backward_flops(args)
            elif packet in flop_registry:
                flops = float(flop_registry[packet](*args, **kwargs, out_val=out))
            var = fixed = 0.0
            for t in _tensors((args, kwargs)) + _tensors(out):
                nbytes = t.numel() * t.element_size()
                if StorageWeakRef(t.untyped_storage()).cdata in self.fixed:
                    fixed += nbytes
                else:
                    var += nbytes
            depthwise = "convolution" in str(packet) and _groups(args) > 1 and _one_channel_per_group(packet, args)
            self.records.append((str(packet).split(".")[-1], flops, var, fixed, depthwise))
            return out

    return Recorder


def _one_channel_per_group(packet: Any, args: tuple) -> bool:
    """A depthwise convolution (one input channel per group: weight [out, 1, kh, kw]), not a grouped one such as
    ResNeXt's 32 groups of 4+ channels, which cuDNN runs as tensor-core GEMMs."""
    import torch
    weight = args[2] if packet is torch.ops.aten.convolution_backward else args[1]
    return getattr(weight, "ndim", 0) >= 2 and weight.shape[1] == 1


def _groups(args: tuple) -> int:
    # aten.convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    # and convolution_backward(..., groups, output_mask): groups is the last int argument.
    ints = [a for a in args if isinstance(a, int) and not isinstance(a, bool)]
    return ints[-1] if ints else 1


def _grouped_conv_backward_flops(args: tuple) -> float:
    """flop_counter prices grad_weight of a grouped conv as if it were dense (x channels too high for a
    depthwise conv: EfficientNet-B0 came out at 40x forward). Each gradient costs what the forward costs."""
    import math
    grad_out, _x, weight = args[0], args[1], args[2]
    mask = args[-1]
    forward = 2.0 * math.prod(grad_out.shape) * math.prod(weight.shape[1:])
    return forward * sum(bool(m) for m in mask)


def _one_pass(model: Any, batch: int, image_size: int, dtype: Any, in_chans: int = 3) -> dict[str, Any]:
    """Forward + backward on meta at `batch`: FLOPs (FlopCounterMode), op records, saved-tensor bytes."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils.flop_counter import FlopCounterMode

    fixed = {StorageWeakRef(p.untyped_storage()).cdata for p in model.parameters()}
    fixed |= {StorageWeakRef(b.untyped_storage()).cdata for b in model.buffers()}
    saved: dict[int, tuple[str, int]] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        key = StorageWeakRef(t.untyped_storage()).cdata
        if key not in fixed and key not in saved:
            saved[key] = (str(t.dtype).replace("torch.", ""), t.untyped_storage().nbytes())
        return t

    x = torch.empty(batch, in_chans, image_size, image_size, device="meta", dtype=dtype)
    recorder = _make_recorder()(fixed)
    with (FlopCounterMode(display=False) as fwd_counter, recorder,
          torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)):
        out = model(x)
    if isinstance(out, (tuple, list)):
        out = out[0]
    forward_flops = fwd_counter.get_total_flops()
    n_forward_ops = len(recorder.records)
    with recorder:
        out.float().sum().backward()
    backward_flops = sum(r[1] for r in recorder.records[n_forward_ops:])
    by_dtype: dict[str, float] = {}
    for dt, nbytes in saved.values():
        by_dtype[dt] = by_dtype.get(dt, 0) + nbytes
    return {"forward_flops": forward_flops, "train_flops": forward_flops + backward_flops,
            "records": recorder.records, "n_forward_ops": n_forward_ops, "saved": by_dtype}


def model_cost(name: str, image_size: int, num_classes: int = 1000, precision: str = "fp32",
               channels_last: bool = False) -> ModelCost:
    """Count everything for one model, image size and precision. Bad names/sizes raise UserError."""
    import torch
    if image_size <= 0:
        raise UserError([Problem("--image-size", "must be a positive number of pixels", "e.g. --image-size 224",
                                 image_size)])
    model = build_model(name, num_classes, image_size)  # a ViT is built for the asked size (timm img_size=)
    model.train()
    dtype = getattr(torch, MIXED_DTYPES.get(precision, "float32"))
    if dtype != torch.float32:
        model = model.to(dtype)  # activations in the autocast dtype; master weights are priced at fp32 below
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    passes = []
    for b in PROBE_BATCHES:
        try:
            passes.append(_one_pass(model, b, image_size, dtype))
        except (RuntimeError, AssertionError, ValueError, IndexError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise UserError([Problem("--image-size", f"model {name!r} cannot take {image_size} px images: {first}",
                                     "use the size the model was built for (e.g. 224 for ViTs) or a larger one",
                                     image_size)]) from exc
        model.zero_grad(set_to_none=True)
    small, large = passes
    b0, b1 = PROBE_BATCHES
    span = b1 - b0
    ops = []
    forward_ops = large["n_forward_ops"]
    if len(small["records"]) == len(large["records"]):
        for (n, f0, v0, c0, dw), (_n, f1, v1, _c1, _dw) in zip(small["records"], large["records"], strict=True):
            per_sample_bytes = max(v1 - v0, 0.0) / span
            ops.append(OpCost(n, max(f1 - f0, 0.0) / span, per_sample_bytes,
                              c0 + max(v0 - per_sample_bytes * b0, 0.0), dw))
    else:  # data-dependent graphs: price everything per sample from the larger pass
        ops = [OpCost(n, f / b1, v / b1, c, dw) for (n, f, v, c, dw) in large["records"]]
    params = sum(p.numel() for p in model.parameters())
    saved_per_sample = {k: (large["saved"].get(k, 0) - small["saved"].get(k, 0)) / span
                        for k in set(small["saved"]) | set(large["saved"])}
    return ModelCost(
        model=name, image_size=image_size, num_classes=num_classes, dtype=str(dtype).replace("torch.", ""),
        params=params, param_bytes=params * 4,
        forward_flops_per_sample=(large["forward_flops"] - small["forward_flops"]) / span,
        train_flops_per_sample=(large["train_flops"] - small["train_flops"]) / span,
        activation_bytes_per_sample=sum(max(v, 0.0) for v in saved_per_sample.values()),
        activation_bytes_by_dtype={k: max(v, 0.0) for k, v in saved_per_sample.items()},
        ops=ops, forward_ops=forward_ops,
    )


def measured_saved_bytes(name: str, image_size: int, batch: int, num_classes: int = 1000) -> float:
    """Saved-for-backward bytes of a REAL forward on the CPU (the check for the meta count): per sample."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef

    from fasttrain.models import registry as models
    model = models.create_model(name, num_classes=num_classes).train()
    params = {StorageWeakRef(p.untyped_storage()).cdata for p in model.parameters()}
    params |= {StorageWeakRef(b.untyped_storage()).cdata for b in model.buffers()}
    seen: dict[int, int] = {}
    keep: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        keep.append(t)  # hold the tensor so its storage address is not reused within this pass
        key = t.untyped_storage().data_ptr()
        if StorageWeakRef(t.untyped_storage()).cdata not in params and key not in seen:
            seen[key] = t.untyped_storage().nbytes()
        return t

    x = torch.randn(batch, 3, image_size, image_size)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        keep.append(model(x))  # the output too: no saved tensor is freed (its address reused) mid-count
    return sum(seen.values()) / batch
