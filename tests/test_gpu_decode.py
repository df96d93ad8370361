"""Issue 24, finding 9: GPU decode (datasets/gpu_decode.py), run here with device="cpu" (the same code path; only
the decoder's device differs). A file nothing can decode was stacked as an all-zero image with its label, though
the comment said it was dropped; the per-image seeding reseeded the run's global RNG (every GPU's too); and the
batched decoder was torchvision's, deprecated in 0.29 in favour of TorchCodec. Real JPEG files."""
from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch
from test_data_prepare import write_jpegs

from fasttrain.datasets.fast_decode import FastImageFiles
from fasttrain.datasets.gpu_decode import GpuDecoder, batch_jpeg_decoder, collate_bytes
from fasttrain.datasets.transforms import train_transform
from fasttrain.profiles.schema import AugmentSpec


def _batch(tmp_path: Path, corrupt: bool) -> list[torch.Tensor]:
    src = write_jpegs(tmp_path / "src", {"a": 3}, size=(40, 30))
    files = sorted(src.rglob("*.jpg"))
    if corrupt:
        files[1].write_bytes(b"\xff\xd8\xff\xe0 cut short, and no PNG either")
    raw = FastImageFiles([(str(p), 0) for p in files], None)
    data, _, bad = collate_bytes([raw[i] for i in range(len(raw))])
    assert not bad
    return data


def test_an_image_nothing_decodes_is_dropped_with_its_label(tmp_path: Path) -> None:
    batch, kept = GpuDecoder(train_transform(AugmentSpec(), 16), torch.device("cpu"))(_batch(tmp_path, True),
                                                                                      [1, 2, 3])
    assert kept == [0, 2] and batch.shape[0] == 2  # was 3: an all-zero stand-in trained with the label of file 1
    assert all(float(image.abs().sum()) > 0 for image in batch)


def test_per_image_seeds_leave_the_global_rng_alone_and_repeat(tmp_path: Path) -> None:
    decoder = GpuDecoder(train_transform(AugmentSpec(), 16), torch.device("cpu"))
    data = _batch(tmp_path, False)
    torch.manual_seed(1234)
    before = torch.random.get_rng_state()
    first, _ = decoder(data, [7, 8, 9])
    assert torch.equal(torch.random.get_rng_state(), before)  # was reseeded to the last sample's seed
    again, _ = decoder(data, [7, 8, 9])
    assert torch.equal(first, again)  # each image's crop is its seed's


def test_torchcodec_decodes_the_batch_where_it_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple] = []
    fake = types.ModuleType("torchcodec.decoders")
    fake.decode_jpeg = lambda data, mode, device: calls.append((len(data), mode, device)) or [data[0]]
    monkeypatch.setitem(sys.modules, "torchcodec", types.ModuleType("torchcodec"))
    monkeypatch.setitem(sys.modules, "torchcodec.decoders", fake)
    library, decode = batch_jpeg_decoder()
    assert library == "torchcodec"
    decode([torch.zeros(3, dtype=torch.uint8)], "cuda")
    assert calls == [(1, "RGB", "cuda")]


def test_without_torchcodec_torchvision_decodes_without_its_deprecation_warning(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch
                                                                                  ) -> None:
    import warnings
    monkeypatch.setitem(sys.modules, "torchcodec", None)  # not installed
    library, decode = batch_jpeg_decoder()
    assert library == "torchvision"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        images = decode(_batch(tmp_path, False), torch.device("cpu"))
    assert [tuple(i.shape) for i in images] == [(3, 30, 40)] * 3
