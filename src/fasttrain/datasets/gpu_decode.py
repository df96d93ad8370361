"""GPU decoding: the loader workers only read bytes; JPEGs are decoded in batches on the GPU (nvJPEG) and augmented
there with the same v2 pipeline.

For when the CPU cannot keep up (few cores beside a fast GPU: the Kaggle note's 2 cores and a T4). The batched
decoder is TorchCodec's `decode_jpeg(list, device=...)` where it is installed (torchvision 0.29 deprecates all of
its own image decoding in its favour), else torchvision's. Files that are not JPEGs, or that nvJPEG refuses, are
decoded on the CPU and moved over, so one odd file does not fail a batch; a file nothing can decode is dropped
from the batch with its label (the caller gets the indices kept). Each image draws its augmentation from its own
seed on a generator of its own: the training process's global RNG is left as it was.
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from fasttrain.datasets.fast_decode import DECODE_ERRORS, decode, is_jpeg


def why_not(device_available: bool) -> str | None:
    """None when GPU decoding can run here, else the one-line reason."""
    if device_available:
        return None
    return ("no CUDA device here: GPU decoding (nvJPEG, through TorchCodec's or torchvision's decode_jpeg) needs an "
            "NVIDIA GPU; on this machine the CPU paths are the ones that apply")


def collate_bytes(samples: list[Any]) -> tuple[list[Any], Any, list[tuple[str, str]]]:
    """Batches of raw file bytes as 1-D uint8 tensors (pinned-able), targets, and the files that failed to read."""
    import torch

    from fasttrain.datasets.bundle import BadSample

    good = [s for s in samples if not isinstance(s, BadSample)]
    bad = [(s.path, s.reason) for s in samples if isinstance(s, BadSample)]
    data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b, _ in good]
    targets = torch.tensor([t for _, t in good], dtype=torch.long)
    return data, targets, bad


def batch_jpeg_decoder() -> tuple[str, Callable[[list[Any], Any], list[Any]]]:
    """(which library, decode(list of 1-D uint8 CPU tensors, device) -> RGB uint8 CHW tensors on the device)."""
    try:
        from torchcodec.decoders import decode_jpeg as codec_decode
    except ImportError:
        from torchvision.io import ImageReadMode, decode_jpeg

        def torchvision_decode(data: list[Any], device: Any) -> list[Any]:
            with warnings.catch_warnings():  # deprecated since 0.29 in favour of TorchCodec (used when installed)
                warnings.simplefilter("ignore", DeprecationWarning)
                return list(decode_jpeg(data, device=device, mode=ImageReadMode.RGB))
        return "torchvision", torchvision_decode

    def torchcodec_decode(data: list[Any], device: Any) -> list[Any]:
        return list(codec_decode(data, mode="RGB", device=device))
    return "torchcodec", torchcodec_decode


class GpuDecoder:
    """bytes batch -> (normalised float batch on `device`, the indices of the samples in it): batched decode,
    then the v2 transform per image."""

    def __init__(self, transform: Any, device: Any):
        from torchvision.transforms import v2

        self.device = device
        self.transform = v2.Compose([s for s in transform.transforms if not isinstance(s, v2.PILToTensor)])
        self.library, self._decode = batch_jpeg_decoder()

    def decode_batch(self, data: list[Any]) -> list[Any | None]:
        """Each image decoded on the device, or None where nothing could decode it."""
        jpeg = [i for i, d in enumerate(data) if is_jpeg(bytes(d[:3].tolist()))]
        out: list[Any | None] = [None] * len(data)
        if jpeg:
            try:
                for i, image in zip(jpeg, self._decode([data[i] for i in jpeg], self.device), strict=True):
                    out[i] = image
            except RuntimeError:  # one bad file fails nvJPEG's batch: decode those one by one on the CPU below
                pass
        for i, image in enumerate(out):
            if image is None:
                try:
                    out[i] = decode(bytes(data[i].numpy()))[0].to(self.device, non_blocking=True)
                except DECODE_ERRORS:
                    out[i] = None  # left out of the batch with its label (the caller keeps the indices)
        return out

    def __call__(self, data: list[Any], seeds: list[int] | None = None) -> tuple[Any, list[int]]:
        """-> (the batch of the images that decoded, their indices in `data`: select the targets with them)."""
        import torch

        from fasttrain.datasets.transforms import seeded_call

        images = self.decode_batch(data)
        kept = [n for n, image in enumerate(images) if image is not None]
        # seeded_call seeds the CPU generator the transforms draw from and gives the training process its state
        # back (torch.manual_seed per sample reseeded the run's global RNG, every GPU's included)
        results = [self.transform(images[n]) if seeds is None else seeded_call(self.transform, images[n], seeds[n])
                   for n in kept]
        if not results:
            return torch.empty((0,), device=self.device), kept
        return torch.stack(results), kept
