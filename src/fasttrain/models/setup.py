"""Getting a model ready for the Plan: device, one-pixel convolutions (CPU), channels_last, activation checkpointing,
backend flags, compile.

torch.compile is lazy: a model that cannot be compiled fails at its first call, not at
`torch.compile(...)`. CompileGuard therefore calls the compiled module until each mode (train, eval)
has run once, and on any failure warns and falls back to the eager module for good.
Imported by the trainer only (torch at the top).
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from fasttrain.models import cpu_allocator
from fasttrain.plan import Plan


def cpu_threads(workers: int, cores: int | None = None) -> int:
    """Compute threads for training on the CPU: one core per loader worker is left free.

    torch's default (one OpenMP thread per core) fights the worker processes for the same cores, and
    OpenMP threads spin while they wait: on the 2-core machine this was 3.7x slower than 1 thread with
    1 worker (benchmarks/cpu_settings.py, docs/benchmarks.md)."""
    cores = cores or len(os.sched_getaffinity(0))
    return max(1, cores - workers)


def configure_backends(plan: Plan) -> list[str]:
    """TF32 matmuls/convolutions (Ampere+: fp32 range, 10-bit mantissa, ~1.1x in the A10G note),
    cudnn.benchmark (tries conv algorithms once per input shape, then reuses the fastest) and, on the CPU,
    the thread count (unless OMP_NUM_THREADS says otherwise) and the allocator (keep_freed_memory).
    -> notes for the run."""
    notes: list[str] = []
    torch.set_float32_matmul_precision("high" if plan.tf32 else "highest")
    if torch.cuda.is_available():
        torch.backends.cudnn.allow_tf32 = plan.tf32
        torch.backends.cudnn.benchmark = plan.cudnn_benchmark
    if plan.device == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        threads = plan.cpu_threads or cpu_threads(plan.workers)
        torch.set_num_threads(threads)
        why = "measured by the tuning trial" if plan.cpu_threads else f"cores minus {plan.workers} loader workers"
        notes.append(f"CPU compute threads: {threads} ({why}; OMP_NUM_THREADS overrides)")
    if plan.device == "cpu":
        kept = cpu_allocator.keep_freed_memory()
        if kept:
            notes.append(kept)
    return notes


class _Checkpointed(nn.Module):
    """Recomputes its child's activations in backward instead of storing them: less memory, ~30% more compute."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self.training and torch.is_grad_enabled():
            return checkpoint(self.inner, *args, use_reentrant=False, **kwargs)
        return self.inner(*args, **kwargs)


def enable_activation_checkpointing(model: nn.Module) -> str:
    """timm models know where to checkpoint; otherwise wrap each top-level child that has parameters.
    Returns how it was done, for the run's notes."""
    setter = getattr(model, "set_grad_checkpointing", None)
    if callable(setter):
        setter(True)
        return "timm set_grad_checkpointing"
    wrapped = 0
    for name, child in list(model.named_children()):
        if any(True for _ in child.parameters()) and not isinstance(child, (nn.Linear, nn.BatchNorm2d)):
            setattr(model, name, _Checkpointed(child))
            wrapped += 1
    return f"torch.utils.checkpoint over {wrapped} top-level blocks"


class CompileGuard:
    """Calls the compiled module; the first call in each mode that raises switches to eager with a warning, except
    for an error `not_compilers` says is not the compiler's (out of memory: the out-of-memory back-off retries the
    batch smaller, compiled; turning compile off for the whole run would be the wrong remedy).

    Shapes: compiled with dynamic=False, for one batch size per mode: the one the engine expects (training: the
    micro-batch, again after each back-off), else the first one seen (validation). Other sizes (a batch short of a
    skipped file, the uneven last part of a back-off's split, the last validation batch) run eager: one step
    eager costs less than a recompile, and with mode reduce-overhead a CUDA graph recorded for each size."""

    def __init__(self, eager: nn.Module, mode: str, warn: Callable[[str], None],
                 not_compilers: Callable[[BaseException], bool] = lambda exc: False):
        self.eager = eager
        self.mode = mode
        self.warn = warn
        self.not_compilers = not_compilers
        self.compiled: Callable[..., Any] | None = torch.compile(eager, mode=mode, dynamic=False)
        self._verified: set[bool] = set()   # training flags that have run compiled at least once
        self._size: dict[bool, int] = {}    # training flag -> the batch size compiled for it
        self._ran_compiled = False          # the last call went through the compiled graph
        self.fallback_reason: str | None = None

    def expect(self, training: bool, batch: int) -> None:
        """Compile for batches of `batch` samples in this mode from now on (a back-off's new micro-batch)."""
        self._size[training] = batch

    def _steady(self, args: tuple[Any, ...]) -> bool:
        """Whether this call's batch is the compiled size of the current mode (the first one seen sets it)."""
        first = args[0] if args else None
        if not isinstance(first, torch.Tensor) or first.dim() == 0:
            return True
        return self._size.setdefault(self.eager.training, int(first.shape[0])) == int(first.shape[0])

    @property
    def active(self) -> bool:
        return self.compiled is not None

    def __call__(self, *args: Any) -> Any:
        compiled = self.compiled
        self._ran_compiled = compiled is not None and self._steady(args)
        if compiled is None or not self._ran_compiled:
            return self.eager(*args)
        if self.eager.training in self._verified:
            return compiled(*args)
        try:
            return compiled(*args)
        except Exception as exc:
            if self.not_compilers(exc):
                raise
            self.fall_back(exc)
        return self.eager(*args)  # outside the handler: the failed attempt's frames and tensors are gone by now

    def verified(self) -> None:
        """The first full step (forward and backward) in this mode worked compiled (a step that ran eager for its
        batch size proves nothing)."""
        if self.compiled is not None and self._ran_compiled:
            self._verified.add(self.eager.training)

    @property
    def ran_compiled(self) -> bool:
        """The last call went through the compiled graph (not eager for an odd batch size, not after a fallback)."""
        return self._ran_compiled and self.compiled is not None

    def is_verified(self, training: bool) -> bool:
        """A whole step in this mode (train or eval) has run compiled: an error now is the model's own."""
        return training in self._verified

    def fall_back(self, exc: BaseException) -> None:
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        self.fallback_reason = f"{type(exc).__name__}: {first}"
        self.compiled = None
        release_failed_compile(exc)
        self.warn(f"torch.compile (mode {self.mode}) failed, training eager instead: {self.fallback_reason}")


def release_failed_compile(exc: BaseException) -> None:
    """Free what a failed torch.compile still holds before the eager run starts: the traceback's frames (the
    aborted forward's activations: on a CPU they live in the same RAM the eager step needs next, and a run of
    resnet50 on 24 GB was killed by the kernel right after a CppCompileError), dynamo's compiled graphs and
    caches, and the garbage cycles they leave."""
    import gc

    for link in (exc, exc.__cause__, exc.__context__):
        if link is not None:
            link.__traceback__ = None
    with contextlib.suppress(Exception):
        torch.compiler.reset()  # the public name of dynamo's reset (torch >= 2.1)
    gc.collect()


def prepare_model(model: nn.Module, plan: Plan, *, activation_checkpointing: bool, warn: Callable[[str], None],
                  wrap: Callable[[nn.Module], nn.Module] | None = None,
                  not_compilers: Callable[[BaseException], bool] = lambda exc: False,
                  ) -> tuple[nn.Module, Callable[..., Any], list[str]]:
    """-> (eager module holding the weights, the callable to run it with, notes).
    `wrap` (DistributedDataParallel, train/parallel/ddp.py DistContext.wrap) goes around the model once it is on its
    device and in channels_last, and torch.compile around the wrapper: the order PyTorch's DDP notes give.
    `not_compilers`: errors the CompileGuard passes on instead of falling back to eager (the caller's OOM test)."""
    notes = configure_backends(plan)
    if activation_checkpointing:
        notes.append("activation checkpointing: " + enable_activation_checkpointing(model))
    model = model.to(plan.device)
    if plan.device == "cpu":
        from fasttrain.models.one_pixel import to_one_pixel
        if to_one_pixel(model):
            notes.append("CPU convolutions: one whose output is a single pixel runs as a matrix product (the same "
                         "sums; 1.4x faster steps for resnet18 at 32 px)")
    if plan.channels_last:
        model = model.to(memory_format=torch.channels_last)
    top = wrap(model) if wrap is not None else model
    if plan.compile:
        return model, CompileGuard(top, plan.compile_mode, warn, not_compilers), notes
    return model, top, notes
