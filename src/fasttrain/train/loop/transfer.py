"""A loader batch's copy to the device: pinned memory and non_blocking, channels_last in the same copy, and on
CUDA on a side stream of its own.

On the compute stream a copy queues behind every kernel already enqueued: the host is a step ahead of the GPU, so
the next batch's copy would wait for this step's backward and optimizer step to finish. On a side stream it runs
while they do; the compute stream then waits for it (wait_stream) before the forward, and record_stream tells the
caching allocator that the compute stream uses the copies, so their memory is not handed out again while it does.
CUDA events on the compute stream around the copy then time only what was not hidden behind the previous step.
"""
from __future__ import annotations

import torch


class DeviceCopy:
    def __init__(self, device: torch.device, *, channels_last: bool, non_blocking: bool,
                 side_stream: bool | None = None):
        self.device = device
        self.channels_last = channels_last
        self.non_blocking = non_blocking  # pinned host memory: the copy may overlap compute
        use = device.type == "cuda" if side_stream is None else side_stream
        self.stream = torch.cuda.Stream(device=device) if use else None

    def __call__(self, images: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.stream is None:
            return self._copy(images, targets)
        compute = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self.stream):
            images, targets = self._copy(images, targets)
        compute.wait_stream(self.stream)
        images.record_stream(compute)
        targets.record_stream(compute)
        return images, targets

    def _copy(self, images: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        blocking = self.non_blocking
        if self.channels_last and images.dim() == 4:
            images = images.to(self.device, non_blocking=blocking, memory_format=torch.channels_last)
        else:
            images = images.to(self.device, non_blocking=blocking)
        return images, targets.to(self.device, non_blocking=blocking)
