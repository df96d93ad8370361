"""GPU decoding: the loader workers only read bytes; JPEGs are decoded in batches on the GPU (nvJPEG through
`torchvision.io.decode_jpeg(list, device="cuda")`) and augmented there with the same v2 pipeline.

For when the CPU cannot keep up (few cores beside a fast GPU: the Kaggle note's 2 cores and a T4). Files that are
not JPEGs, or that nvJPEG refuses, are decoded on the CPU and moved over, so one odd file does not fail a batch.
Each image draws its augmentation from a generator seeded per sample, like the CPU paths.
"""
from __future__ import annotations

from typing import Any

from fasttrain.datasets.fast_decode import DECODE_ERRORS, decode, is_jpeg


def why_not(device_available: bool) -> str | None:
    """None when GPU decoding can run here, else the one-line reason."""
    if device_available:
        return None
    return ("no CUDA device here: GPU decoding (torchvision.io.decode_jpeg(device='cuda')) needs an NVIDIA GPU; "
            "on this machine the CPU paths are the ones that apply")


def collate_bytes(samples: list[Any]) -> tuple[list[Any], Any, list[tuple[str, str]]]:
    """Batches of raw file bytes as 1-D uint8 tensors (pinned-able), targets, and the files that failed to read."""
    import torch

    from fasttrain.datasets.bundle import BadSample

    good = [s for s in samples if not isinstance(s, BadSample)]
    bad = [(s.path, s.reason) for s in samples if isinstance(s, BadSample)]
    data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b, _ in good]
    targets = torch.tensor([t for _, t in good], dtype=torch.long)
    return data, targets, bad


class GpuDecoder:
    """bytes batch -> normalised float batch on `device`: batched decode, then the v2 transform per image."""

    def __init__(self, transform: Any, device: Any):
        from torchvision.transforms import v2

        self.device = device
        self.transform = v2.Compose([s for s in transform.transforms if not isinstance(s, v2.PILToTensor)])

    def decode_batch(self, data: list[Any]) -> list[Any]:
        import torch
        from torchvision.io import ImageReadMode, decode_jpeg

        jpeg = [i for i, d in enumerate(data) if is_jpeg(bytes(d[:3].tolist()))]
        out: list[Any] = [None] * len(data)
        if jpeg:
            try:
                decoded = decode_jpeg([data[i] for i in jpeg], device=self.device, mode=ImageReadMode.RGB)
                for i, image in zip(jpeg, decoded):
                    out[i] = image
            except RuntimeError:  # one bad file fails nvJPEG's batch: decode those one by one on the CPU below
                pass
        for i, image in enumerate(out):
            if image is None:
                try:
                    out[i] = decode(bytes(data[i].numpy()))[0].to(self.device, non_blocking=True)
                except DECODE_ERRORS:
                    out[i] = torch.zeros((3, 8, 8), dtype=torch.uint8, device=self.device)  # dropped by caller
        return out

    def __call__(self, data: list[Any], seeds: list[int] | None = None) -> Any:
        import torch

        images = self.decode_batch(data)
        results = []
        for n, image in enumerate(images):
            if seeds is not None:
                torch.manual_seed(seeds[n])
            results.append(self.transform(image))
        return torch.stack(results)
