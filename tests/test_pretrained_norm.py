"""A run from timm's published weights (`--pretrained`) normalises its images with the mean/std those weights were
trained with (a ViT's 0.5s, not ImageNet's), in every path its pixels take (per-image transforms, the fast JPEG
path, images decoded once into RAM), says so in the plan, and records the pair in model.json for predict; a run
without --pretrained keeps ImageNet's. The weights come from a hand-made Hugging Face cache: no network."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from image_tree import write_tree
from test_pretrained_offline import _hub_cache, offline_child  # noqa: F401 - the fixture, used by name

from fasttrain.datasets import batch_augment as ba
from fasttrain.datasets.transforms import (
    IMAGENET,
    MEAN,
    STD,
    train_transform,
    val_transform,
)
from fasttrain.models.pretrained import pretrained_data_config
from fasttrain.profiles.schema import AugmentSpec
from fasttrain.train.setup.finetune import pretrained_norm

HALF = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
NO_AUGMENT = AugmentSpec(random_resized_crop_scale=(1.0, 1.0), hflip=0.0)


# -- the choice -------------------------------------------------------------------------------------------------
def test_the_weights_own_mean_and_std_are_chosen_and_said() -> None:
    norm, notes = pretrained_norm("vit_base_patch16_224", (*HALF, 224), 32)
    assert norm == HALF
    assert notes == [("normalised with vit_base_patch16_224's own mean (0.5, 0.5, 0.5) and std (0.5, 0.5, 0.5), "
                      "as its pretrained weights expect (not ImageNet's)"),
                     "vit_base_patch16_224's weights were trained at 224 px; this run trains at 32 px (--image-size)"]


def test_imagenet_weights_at_their_own_size_say_nothing_and_no_config_is_imagenet() -> None:
    assert pretrained_norm("resnet18", (MEAN, STD, 224), 224) == (IMAGENET, [])
    norm, notes = pretrained_norm("resnet18", (MEAN, STD, 224), 64)
    assert norm == IMAGENET
    assert notes == ["resnet18's weights were trained at 224 px; this run trains at 64 px (--image-size)"]
    assert pretrained_norm("mine:build", None, 32) == (IMAGENET, [])


def test_timm_configs_are_read_as_timm_publishes_them() -> None:
    assert pretrained_data_config("vit_tiny_patch16_224") == (*HALF, 224)
    assert pretrained_data_config("inception_v3") == (*HALF, 299)
    assert pretrained_data_config("resnet18") == (MEAN, STD, 224)
    assert pretrained_data_config("no_such_model_anywhere") is None
    assert pretrained_data_config("tiny_cnn") is None


# -- every path the pixels take ---------------------------------------------------------------------------------
def test_per_image_and_batched_paths_normalise_with_the_pair_given() -> None:
    from torchvision.transforms import v2

    from fasttrain.datasets.fast_decode import FastTransform

    pixels = torch.tensor([0, 51, 255], dtype=torch.uint8).view(1, 3, 1, 1).expand(1, 3, 8, 8).contiguous()
    want = (pixels.float() / 255 - 0.5) / 0.5
    assert torch.allclose(ba.normalise(pixels.float(), HALF), want, atol=1e-6)
    imagenet = (pixels.float() / 255 - torch.tensor(MEAN).view(1, 3, 1, 1)) / torch.tensor(STD).view(1, 3, 1, 1)
    assert torch.allclose(ba.normalise(pixels.float()), imagenet, atol=1e-5)  # the default is unchanged
    sizes = torch.tensor([[8, 8]], dtype=torch.int32)
    assert torch.allclose(ba.val_batch(pixels, sizes, 8, HALF), want, atol=1e-5)
    image = v2.functional.to_pil_image(pixels[0])
    assert torch.allclose(val_transform(8, crop_pct=1.0, norm=HALF)(image), want[0], atol=1e-5)
    assert torch.allclose(train_transform(NO_AUGMENT, 8, HALF)(image), want[0], atol=1e-5)
    # the fast JPEG path: a pair other than ImageNet's is not left to normalise_batch (which knows only ImageNet's)
    assert FastTransform(train_transform(NO_AUGMENT, 8)).deferred
    assert not FastTransform(train_transform(NO_AUGMENT, 8, HALF)).deferred


def test_images_decoded_in_ram_normalise_train_and_val_batches_with_the_pair(tmp_path: Path) -> None:
    import numpy as np

    from fasttrain.datasets.build import build_datasets
    from fasttrain.datasets.decoded import DecodeBudget

    data = write_tree(tmp_path / "data", {"a": 6, "b": 6}, size=16)
    bundle = build_datasets(str(data), image_size=16, augment=NO_AUGMENT, decode=DecodeBudget(2**26), norm=HALF)
    assert bundle.decoded_in_ram and bundle.norm == HALF
    for split in (bundle.train, bundle.val):
        indices = list(range(len(split)))
        images, _, bad = split.batch(indices, ba.sample_keys(0, 0, indices))
        assert not bad
        raw = split.pixels[torch.tensor(indices)].float()  # uint8 as decoded; a 16 px image, a full-size crop
        assert torch.allclose(images, (raw[:, :, :16, :16] / 255 - 0.5) / 0.5, atol=1e-4)
        assert float(images.min()) >= -1.0 - 1e-6 and float(images.max()) <= 1.0 + 1e-6
    per_image = build_datasets(str(data), image_size=16, augment=NO_AUGMENT, decode=None, norm=HALF)
    image, _ = per_image.val[0]
    assert per_image.norm == HALF and float(image.min()) >= -1.0 - 1e-6 and float(image.max()) <= 1.0 + 1e-6
    plain = build_datasets(str(data), image_size=16, augment=NO_AUGMENT, decode=None)
    assert plain.norm == IMAGENET and not np.allclose(plain.val[0][0].numpy(), image.numpy())


# -- a whole run ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pretrained", [True, False])
def test_a_pretrained_vit_run_writes_its_own_mean_and_std_into_model_json(offline_child, tmp_path: Path,  # noqa: F811
                                                                          pretrained: bool) -> None:
    import timm
    torch.manual_seed(5)
    assert pretrained_data_config("test_vit") == (*HALF, 160)  # timm's tiny test ViT: 0.37 M parameters
    _hub_cache(tmp_path / "hf", "timm/test_vit.r160_in1k", timm.create_model("test_vit").state_dict())
    data = write_tree(tmp_path / "data", {"a": 6, "b": 6}, size=32)
    res, _, sockets = offline_child("train", *(["--pretrained"] if pretrained else []), "--model", "test_vit",
                                    "--data", str(data), "--image-size", "32", "--epochs", "1", "--runs-dir", "runs",
                                    "--run-name", "r", "--no-tune")
    assert res.returncode == 0, res.stderr
    assert sockets == "", sockets
    meta = json.loads((tmp_path / "runs" / "r" / "model.json").read_text())
    said = "normalised with test_vit's own mean (0.5, 0.5, 0.5) and std (0.5, 0.5, 0.5)"
    if pretrained:
        assert (meta["mean"], meta["std"]) == ([0.5] * 3, [0.5] * 3)
        assert said in res.stdout and "test_vit's weights were trained at 160 px; this run trains at 32 px" \
            in res.stdout
    else:  # from scratch: ImageNet's, as before, and nothing said
        assert (meta["mean"], meta["std"]) == (list(MEAN), list(STD))
        assert said not in res.stdout and "weights were trained at" not in res.stdout
