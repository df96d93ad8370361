"""Issue 24, finding 12: nothing chose torch.compile's `dynamic=` while three things change the batch size (a batch
short of skipped files, the uneven parts of an out-of-memory split, the last validation batch): each was a
recompile, and with mode reduce-overhead a CUDA graph each. Now the graph is compiled for one batch size per mode
(dynamic=False; training: the micro-batch, again after a back-off) and other sizes run eager. The compiles are
counted with a real torch.compile whose backend only counts the graphs dynamo hands it (no C++ compiler needed)."""
from __future__ import annotations

import pytest
import torch
from loop_helpers import cpu_plan, make_trainer, tiny_mlp

from fasttrain.train.loop.events import Collaborators


@pytest.fixture
def graphs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The batch size of each graph dynamo compiles ("s0"-like for a dynamic one)."""
    import fasttrain.models.setup as ms
    seen: list[str] = []
    real_compile = torch.compile

    def counting_backend(gm, example_inputs):
        tensors = [i for i in example_inputs if isinstance(i, torch.Tensor) and i.dim() > 1]
        seen.append(str(max(tensors, key=lambda t: t.dim()).shape[0]) if tensors else "?")
        return gm.forward

    def compile_counting(module, mode=None, dynamic=None):
        return real_compile(module, backend=counting_backend, dynamic=dynamic)

    torch._dynamo.reset()  # no graph cached by an earlier test
    monkeypatch.setattr(ms.torch, "compile", compile_counting)
    yield seen
    torch._dynamo.reset()


def _batches(sizes: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [(torch.randn(n, 12, generator=gen), torch.randint(0, 3, (n,), generator=gen)) for n in sizes]


def test_short_batches_run_eager_instead_of_recompiling(graphs: list[str]) -> None:
    plan, profile = cpu_plan(loader={"batch_size": 8, "num_workers": 0, "image_size": 16},
                             optim={"optimizer": "sgd", "schedule": "constant"}, speed={"compile": True})
    warnings: list[str] = []
    trainer = make_trainer(plan, profile.optim, tiny_mlp(), batches=4,
                           collaborators=Collaborators(warn=warnings.append))
    trainer.train_epoch(_batches([8, 8, 5, 8]), epoch=0)  # batch 3 lost 3 unreadable files
    trainer.validate(_batches([8, 8, 3]))                 # the last validation batch is short
    assert warnings == [] and trainer.engine.runner.active
    assert graphs == ["8", "8"], graphs  # one graph per mode; was 4: 8, then a dynamic one, in each mode


def test_after_a_back_off_the_new_micro_batch_is_compiled_once(graphs: list[str]) -> None:
    plan, profile = cpu_plan(loader={"batch_size": 8, "num_workers": 0, "image_size": 16},
                             optim={"optimizer": "sgd", "schedule": "constant"}, speed={"compile": True})
    trainer = make_trainer(plan, profile.optim, tiny_mlp(), batches=3)
    trainer.engine.backoff.splits = 2  # as after one halving (or a resume of a run that halved)
    trainer.train_epoch(_batches([8, 7, 8]), epoch=0)  # 4+4, then 4+3 (the 3 eager), then 4+4
    assert graphs == ["4"], graphs
