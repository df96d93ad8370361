"""Issue 39 items 3, 6 and 8 on a real GPU (marker `gpu`; skipped with the reason without CUDA): what only a CUDA
device shows of validation's batch-norm re-estimate and of mirrored validation under CUDA graphs.

- Item 3: fp32 + compile mode reduce-overhead + test_flip raised "accessing tensor output of CUDAGraphs that has
  been overwritten" (the first pass's logits were the graph's output buffer); the CPU stand-in is
  tests/test_validation_graph_output.py.
- Item 8: the re-estimate made a host sync per batch-norm layer per batch (`float(num_batches_tracked)` under
  momentum None); under torch's sync debug mode "error" that raised. CPU: tests/test_norm_stats.py counts the reads.
- Item 6: the ranks' statistics averaged on the device through NCCL, without a sync (a world of one; the 2-rank
  arithmetic is tests/test_norm_stats_ddp.py).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import socket

import pytest

pytestmark = pytest.mark.gpu


def _resnet18():
    import torch

    from fasttrain.models.registry import create_model
    torch.manual_seed(0)
    return create_model("resnet18", num_classes=3)


def _batches(n: int, size: int = 8, device: str = "cpu"):
    import torch
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(size, 3, 32, 32, generator=g).to(device), torch.randint(0, 3, (size,), generator=g).to(device))
            for _ in range(n)]


def _identity(images, targets):
    return images, targets


def test_mirrored_validation_under_cuda_graphs_in_fp32() -> None:
    """Item 3: validation with test_flip through torch.compile(mode="reduce-overhead") in fp32 finishes, compiled
    (no fallback to eager), and scores what the eager module scores. Three validations: the CUDA graph is
    recorded after its warm-up and replayed from then on, where the first pass's output used to be overwritten."""
    import torch
    from gpu_helpers import release_cuda
    from loop_helpers import cpu_plan

    from fasttrain.train.loop.step import StepEngine
    from fasttrain.train.loop.validation import evaluate

    plan, profile = cpu_plan(speed={"precision": "fp32", "compile": False, "fused_optimizer": False,
                                    "channels_last": False})
    plan = dataclasses.replace(plan, device="cuda", compile=True, compile_mode="reduce-overhead")
    engine = StepEngine.build(plan, profile.optim, _resnet18(), batches_per_epoch=4)
    loader = _batches(4)
    try:
        rows = [evaluate(engine, loader, test_flip=True) for _ in range(3)]
        assert engine.runner.fallback_reason is None, engine.runner.fallback_reason
        module = engine.module.eval()
        with torch.no_grad():
            loss = sum(float(torch.nn.functional.cross_entropy(
                (module(x.cuda()) + module(x.cuda().flip(-1))) / 2, y.cuda(), reduction="sum")) for x, y in loader)
    finally:
        release_cuda()
    for row in rows:
        assert row["val_images"] == 32
        assert row["val_loss"] == pytest.approx(loss / 32, rel=1e-3)


def test_the_reestimate_makes_no_host_sync() -> None:
    """Item 8: re-estimating resnet18's 20 batch-norm layers on 3 batches already on the GPU, under sync debug
    mode "error": before, the first layer's `float(num_batches_tracked)` raised."""
    import torch
    from gpu_helpers import release_cuda, syncs_raise

    from fasttrain.train.loop.norm_stats import RecentBatches, recalibrate, training_norms

    model = _resnet18().cuda().train()
    names = training_norms(model)
    recent = RecentBatches(24)
    for batch in _batches(3, device="cuda"):
        recent.add(batch)
    try:
        with torch.no_grad():
            model(next(iter(recent))[0])  # cuDNN's start-up outside the check
        with syncs_raise():
            recalibrate(model, names, recent, _identity, contextlib.nullcontext)
        reference = copy.deepcopy(model)
        for name in names:
            m = reference.get_submodule(name)
            m.reset_running_stats()
            m.momentum = None
        with torch.no_grad():
            for images, _ in recent:
                reference(images)
        for name in names:
            torch.testing.assert_close(model.get_submodule(name).running_var, reference.get_submodule(name).running_var,
                                       rtol=1e-4, atol=1e-5)
    finally:
        release_cuda()


def test_the_statistics_are_averaged_over_ranks_on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """Item 6 on NCCL, a world of one: the flat tensor of statistics is all-reduced on the GPU (no copy to the
    host, no sync) and lands back in the device buffers unchanged (one rank's mean is itself)."""
    import torch
    from gpu_helpers import release_cuda, syncs_raise

    from fasttrain.train.loop.norm_stats import share_over_ranks, training_norms
    from fasttrain.train.parallel import ddp
    from fasttrain.train.types import WorkerWorld

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    model = _resnet18().cuda().train()
    with torch.no_grad():
        model(_batches(1, device="cuda")[0][0])
    names = training_norms(model)
    before = {k: v.clone() for k, v in model.state_dict().items() if "running_" in k}
    try:
        with ddp.joined(WorkerWorld(0, 0, 1, 1), "cuda") as ctx:
            assert ctx is not None and ctx.backend == "nccl"
            share_over_ranks(model, names, 3, ctx)  # the first collective sets NCCL up: outside the check
            with syncs_raise():
                share_over_ranks(model, names, 3, ctx)
            torch.cuda.synchronize()
    finally:
        release_cuda()
    after = {k: v for k, v in model.state_dict().items() if "running_" in k}
    assert all(v.is_cuda for v in after.values())
    for key, value in before.items():
        torch.testing.assert_close(after[key], value, rtol=1e-6, atol=1e-7)
