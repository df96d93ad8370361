"""The recipe of a run that starts from weights (`--weights FILE`, `--pretrained`), not from random ones.

Pretrained features are what such a run is for, and the LR a preset chose for training from scratch moves them
most in the first steps, while the re-made head is still random. The run trains at `optim.finetune_lr_scale` of
the profile's base LR (0.33 by default). Measured on a Kaggle-shaped Fashion-MNIST (4,000 training images, resnet18
at 32 px, 4 epochs, the `cpu` preset; benchmarks/finetune.py, docs/benchmarks.md "Fine-tuning") with two sets of
weights a plain torch loop pretrained on 20,000 other images of it: after the first epoch a third of the preset's
LR validated 0.765-0.795 where the preset's own LR validated 0.738-0.773 (seeds 0-1, both sets of weights), and
in the timed runs it ended higher too (0.853 against 0.845, 0.838 against 0.820: medians); a tenth of it, no EMA, a
faster EMA, a head learning 3x or 10x faster,
gentler crops or no label smoothing did no better beyond the noise of a 400-image validation set. An LR the user
set stays, and the plan says so. A run from timm's published weights (`--pretrained`) normalises its images with
the mean/std those weights were trained with (pretrained_norm).
Pure: the profile (or the weights' data config) in, the profile (or the normalisation) and the plan's notes out.
"""
from __future__ import annotations

from fasttrain.datasets.transforms import IMAGENET, Norm
from fasttrain.profiles.presets import Resolved

LABEL = "fine-tuning"  # the provenance `profiles show` and the run's profile.yaml give the changed LR


def fine_tune(resolved: Resolved, weights: str | None) -> tuple[Resolved, str | None]:
    """(the profile a run from `weights` trains with, the plan's note); (unchanged, None) from scratch.
    `weights`: where they come from, in words (a file, a hub id), or None."""
    if weights is None:
        return resolved, None
    optim = resolved.profile.optim
    if resolved.user_set("optim.base_lr"):
        return resolved, (
            f"fine-tuning from {weights}: optim.base_lr {optim.base_lr:g} is yours and stays "
            f"(a run from weights otherwise trains at optim.finetune_lr_scale {optim.finetune_lr_scale:g} "
            "of the preset's LR)"
        )
    scale = optim.finetune_lr_scale
    if scale == 1:
        return resolved, f"fine-tuning from {weights}: the LR of a run from scratch (optim.finetune_lr_scale 1)"
    lr = optim.base_lr * scale
    tuned = resolved.with_flags({"optim.base_lr": (f"{LABEL} (optim.finetune_lr_scale {scale:g})", lr)})
    return tuned, (
        f"fine-tuning from {weights}: base LR {optim.base_lr:g} -> {lr:.3g} (optim.finetune_lr_scale "
        f"{scale:g}: pretrained features are kept, not retrained; --set optim.finetune_lr_scale=1 "
        "trains at the preset's LR)"
    )


def pretrained_norm(
    model_name: str, config: tuple[tuple[float, ...], tuple[float, ...], int] | None, image_size: int
) -> tuple[Norm, list[str]]:
    """(the run's normalisation, the plan's notes) for a run from `model_name`'s published weights, whose
    `config` (mean, std, input px: models.pretrained.pretrained_data_config) is what they were trained with; None:
    ImageNet's, as a run from scratch. A ViT's weights expect (0.5, 0.5, 0.5): fed ImageNet-normalised pixels,
    every input is shifted and scaled from what its features saw. Pure."""
    if config is None:
        return IMAGENET, []
    mean, std, trained_px = config
    notes = []
    if (mean, std) != IMAGENET:
        notes.append(
            f"normalised with {model_name}'s own mean {_three(mean)} and std {_three(std)}, as its "
            "pretrained weights expect (not ImageNet's)"
        )
    if trained_px != image_size:
        notes.append(
            f"{model_name}'s weights were trained at {trained_px} px; this run trains at {image_size} px (--image-size)"
        )
    return (mean, std), notes


def _three(values: tuple[float, ...]) -> str:
    return "(" + ", ".join(f"{v:g}" for v in values) + ")"
