"""estimate's refusals, each one clear line and exit 2: sizes out of range (--dataset-size, --image-size, --epochs,
--num-classes, all reported at once), a batch larger than the training set (the same refusal as `train`), and the
names and paths typed for its flags (--model, also `train`'s; --gpu, --data)."""
from __future__ import annotations

from pathlib import Path

from fasttrain.core.errors import Problem, UserError
from fasttrain.plan import Plan, check_image_size

# Upper bounds: far past any real run (LAION-5B is 5.8e9 samples); beyond them a typo is likelier, and the
# arithmetic of the forecast would lose its meaning.
MAX_DATASET_SIZE = 10**12
MAX_EPOCHS = 100_000


def validate_sizes(dataset_size: int | None, image_size: int | None, epochs: int | None, num_classes: int) -> None:
    from fasttrain.models.registry import check_num_classes
    problems = []
    if dataset_size is not None and dataset_size <= 0:
        problems.append(Problem("--dataset-size", "must be a positive number of training samples",
                                "e.g. --dataset-size 1281167 (ImageNet-1k)", dataset_size))
    elif dataset_size is not None and dataset_size > MAX_DATASET_SIZE:
        problems.append(Problem("--dataset-size", f"more than {MAX_DATASET_SIZE:,} training samples",
                                "e.g. --dataset-size 1281167 (ImageNet-1k)", dataset_size))
    if image_size is not None:
        try:
            check_image_size(image_size)
        except UserError as exc:
            problems.extend(exc.problems)
    if epochs is not None and not 1 <= epochs <= MAX_EPOCHS:
        problems.append(Problem("--epochs", f"must be a whole number from 1 to {MAX_EPOCHS:,}", "", epochs))
    try:
        check_num_classes(num_classes)
    except UserError as exc:
        problems.extend(exc.problems)
    if problems:
        raise UserError(problems)


def check_full_batch(plan: Plan) -> None:
    """The same refusal as `train`: a batch larger than the training set leaves an epoch with no full batch
    (drop_last), so there is nothing to forecast; exit 2 instead of printing 0 iterations."""
    if plan.iterations_per_epoch == 0:
        devices = f" x {plan.world_size} devices" if plan.world_size > 1 else ""
        raise UserError([Problem("loader.batch_size", f"larger than the {plan.dataset_size} training samples"
                                 f"{' (batch ' + str(plan.batch_size) + devices + ')' if devices else ''}, "
                                 "so an epoch has no full batch", "lower it with --set loader.batch_size=N",
                                 plan.batch_size)])


MAX_NAME_CHARS = 256  # model and GPU names, module:callable specs: longer is a paste accident


def check_name(value: str, flag: str, fix: str) -> str:
    """A name given on the command line: not empty, not blank, no control characters (NUL, newline...)."""
    if not value.strip():
        raise UserError([Problem(flag, "empty" if not value else "blank (only whitespace)", f"give {fix}", value)])
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise UserError([Problem(flag, "contains control characters (NUL, newline, ...)", f"give {fix}",
                                 value if len(value) <= MAX_NAME_CHARS else None)])
    if len(value) > MAX_NAME_CHARS:
        raise UserError([Problem(flag, f"{len(value):,} characters long (at most {MAX_NAME_CHARS})", f"give {fix}",
                                 value[:40] + "...")])
    return value


def check_path(value: Path | str, flag: str, what: str) -> Path:
    """A path given on the command line: not empty and no NUL byte (the OS cannot even look it up)."""
    text = str(value)
    if not text.strip():
        raise UserError([Problem(flag, "empty path", f"give {what}", text)])
    if "\x00" in text:
        raise UserError([Problem(flag, "the path contains a NUL byte", f"give {what}", text)])
    return Path(text)


def check_flags(model: str, gpu: str | None, data: Path | None, dataset_size: int | None, image_size: int | None,
                epochs: int | None, num_classes: int) -> None:
    """estimate's own refusals (exit 2), before anything is probed or resolved."""
    validate_sizes(dataset_size, image_size, epochs, num_classes)
    check_name(model, "--model", "a timm or torchvision name, tiny_cnn, or module:callable")
    if gpu is not None:
        check_name(gpu, "--gpu", "a GPU of the spec file, e.g. --gpu T4 (fasttrain estimate --compare gpus)")
    if data is not None:
        check_path(data, "--data", "an image folder of class sub-folders or a fasttrain data prepare folder")
    if data is not None and dataset_size is not None:
        raise UserError([Problem("--data", "give --data or --dataset-size, not both",
                                 "--data counts the images itself")])
