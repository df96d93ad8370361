"""Issue 24, finding 11: the host-to-device copy ran on the compute stream, so the next batch's copy queued behind
this step's compute. On CUDA it now runs on a side stream: the copy inside that stream, the compute stream waiting
for it, the copies recorded as used by the compute stream. torch.cuda's stream functions are faked (the copy
itself runs to the CPU), so the order of those calls is checked here; the gpu test checks the values on a GPU."""
from __future__ import annotations

import contextlib

import pytest
import torch

from fasttrain.train.loop.transfer import DeviceCopy


class FakeStreams:
    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.calls: list[str] = []
        self.active = "compute"
        calls = self.calls
        streams = self

        class Stream:
            def __init__(self, device=None, name="side"):
                self.name = name

            def wait_stream(self, other) -> None:
                calls.append(f"{self.name} waits for {other.name}")

        @contextlib.contextmanager
        def stream(s):
            streams.active = s.name
            calls.append(f"enter {s.name}")
            yield
            streams.active = "compute"
            calls.append(f"leave {s.name}")

        real_to = torch.Tensor.to

        def to(tensor, *args, **kwargs):
            calls.append(f"copy on {streams.active}")
            return real_to(tensor, *args, **kwargs)

        monkeypatch.setattr(torch.cuda, "Stream", Stream)
        monkeypatch.setattr(torch.cuda, "stream", stream)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream(name="compute"))
        monkeypatch.setattr(torch.Tensor, "to", to)
        monkeypatch.setattr(torch.Tensor, "record_stream", lambda t, s: calls.append(f"record on {s.name}"))


def test_the_copy_runs_on_a_side_stream_the_compute_stream_waits_for(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeStreams(monkeypatch)
    copy = DeviceCopy(torch.device("cpu"), channels_last=True, non_blocking=True, side_stream=True)
    images, _targets = copy(torch.randn(2, 3, 4, 4), torch.tensor([0, 1]))
    assert fake.calls == ["enter side", "copy on side", "copy on side", "leave side", "compute waits for side",
                          "record on compute", "record on compute"]
    assert images.is_contiguous(memory_format=torch.channels_last)


def test_a_cpu_copy_needs_no_stream() -> None:
    copy = DeviceCopy(torch.device("cpu"), channels_last=False, non_blocking=False)
    assert copy.stream is None
    images, _ = copy(torch.ones(1, 3, 2, 2), torch.tensor([0]))
    assert torch.equal(images, torch.ones(1, 3, 2, 2))
