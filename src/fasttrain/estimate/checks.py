"""estimate's refusals, each one clear line and exit 2: sizes out of range (--dataset-size, --image-size, --epochs,
--num-classes, all reported at once), and a batch larger than the training set (the same refusal as `train`)."""
from __future__ import annotations

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
