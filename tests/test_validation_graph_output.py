"""Issue 39 item 3: validation with test_flip holds the first pass's logits across the mirrored pass.

Under torch.compile(mode="reduce-overhead") each call replays a CUDA graph that writes its output into the same
static buffer, and in fp32 `logits.float()` is the buffer itself: the mirrored pass overwrote it (on a GPU:
"accessing tensor output of CUDAGraphs that has been overwritten"). Here a stand-in runner returns one
preallocated buffer per call the way a replayed graph does; validation must score the same as with the module.
"""
from __future__ import annotations

import pytest
import torch
from loop_helpers import cpu_plan

C = 3


class GraphLike:
    """As a replayed CUDA graph: every call copies its result into the same output buffer and returns that."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        self.out: torch.Tensor | None = None
        self.calls = 0

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        result = self.module(images)
        if self.out is None:
            self.out = torch.empty_like(result)
        self.out.copy_(result)
        self.calls += 1
        return self.out


def _picker() -> torch.nn.Module:
    """Logits = the first C pixels of a 1 x 2C image; its mirror image brings the last C pixels, reversed."""
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(2 * C, C, bias=False))
    with torch.no_grad():
        model[1].weight.copy_(torch.eye(C, 2 * C))
    return model


def _image(label: int, mirrored: int) -> torch.Tensor:
    """Taken for `label` as is (1.0) and for `mirrored` in the mirror image (0.6): the average says `label`, the
    mirror image alone says `mirrored`."""
    pixels = torch.zeros(2 * C)
    pixels[label] = 1.0
    pixels[2 * C - 1 - mirrored] = 0.6
    return pixels.view(1, 1, 2 * C)


def _loader() -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.stack([_image(0, 1), _image(1, 2), _image(2, 0)]), torch.tensor([0, 1, 2])),
            (torch.stack([_image(2, 1), _image(1, 0), _image(0, 2)]), torch.tensor([2, 1, 0]))]


def _engine(precision: str):
    from fasttrain.train.loop.step import StepEngine
    plan, profile = cpu_plan(speed={"precision": precision, "channels_last": False, "compile": False})
    return StepEngine.build(plan, profile.optim, _picker(), batches_per_epoch=1)


@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_the_flip_average_survives_a_runner_that_reuses_its_output(precision: str) -> None:
    from fasttrain.train.loop.validation import evaluate
    eager = evaluate(_engine(precision), _loader(), test_flip=True)
    assert eager["val_acc1"] == 1.0  # the average finds every class; the mirror images alone find none
    engine = _engine(precision)
    graph = GraphLike(engine.module)
    engine.runner = graph
    replayed = evaluate(engine, _loader(), test_flip=True)
    assert graph.calls == 4
    assert replayed["val_acc1"] == 1.0, "the first pass's logits were overwritten by the mirrored pass"
    assert replayed["val_loss"] == pytest.approx(eager["val_loss"], rel=1e-6)
