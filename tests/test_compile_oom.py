"""Issue 24, finding 10: an out-of-memory error at the first compiled step turned torch.compile off for the whole
run (CompileGuard fell back to eager on any exception). The back-off now retries the batch smaller, still
compiled. torch.compile is replaced by a stand-in that runs the module like the compiled graph would and fails
above a batch size the way the allocator does (a real compile costs minutes on this CPU; the gpu test compiles)."""
from __future__ import annotations

import pytest
import torch
from loop_helpers import cpu_plan, make_trainer, tiny_mlp

from fasttrain.train.loop.events import Collaborators


def test_a_first_step_out_of_memory_keeps_compile_and_halves_the_batch(monkeypatch: pytest.MonkeyPatch) -> None:
    import fasttrain.models.setup as ms
    sizes: list[int] = []

    def compiled_with_a_memory_limit(module, mode=None, dynamic=None):
        def call(x):
            sizes.append(int(x.shape[0]))
            if x.shape[0] > 2:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (test)")
            return module(x)
        return call

    monkeypatch.setattr(ms.torch, "compile", compiled_with_a_memory_limit)
    plan, profile = cpu_plan(optim={"optimizer": "sgd", "schedule": "constant"}, speed={"compile": True})
    warnings: list[str] = []
    trainer = make_trainer(plan, profile.optim, tiny_mlp(), batches=2,
                           collaborators=Collaborators(warn=warnings.append))
    gen = torch.Generator().manual_seed(0)
    batches = [(torch.randn(4, 12, generator=gen), torch.randint(0, 3, (4,), generator=gen)) for _ in range(2)]
    trainer.train_epoch(batches, epoch=0)
    assert trainer.engine.runner.active, "compile was turned off by an out-of-memory error"  # was: fell back
    assert not any("torch.compile" in w for w in warnings), warnings
    assert trainer.engine.backoff.splits == 2 and sizes == [4, 2, 2, 2, 2]
