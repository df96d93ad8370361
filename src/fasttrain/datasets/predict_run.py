"""A run's model on a folder of images, laid out as a submission: what `fasttrain predict` and
`fasttrain.predict()` both call (gather: the run's model files, the sample submission, the image files; compute:
the model over the images, datasets/submission.py's layout).

With a sample submission only the images it names are read, and an image that cannot be read stops the run (its
row would be missing, and a scorer rejects the file); without one, unreadable images are skipped and listed."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttrain.core.errors import Problem, UserError
from fasttrain.datasets.submission import (
    FLAG,
    MAX_SAMPLE_BYTES,
    Sample,
    Submission,
    lay_out,
    match_ids,
    parse_sample,
)


@dataclass(frozen=True)
class Predicted:
    """The submission, the model.json it came from, and the (file, reason) pairs that could not be read."""

    submission: Submission
    meta: dict[str, Any]
    unreadable: list[tuple[Path, str]]


def read_sample(path: Path, class_names: list[str]) -> Sample:
    """The sample submission at `path`; a UserError (one line) when it is missing, unreadable or not a sample."""
    try:
        if path.stat().st_size > MAX_SAMPLE_BYTES:
            raise UserError([Problem(FLAG, f"{str(path)!r} is over {MAX_SAMPLE_BYTES // 2**20} MiB: not a sample "
                                     "submission", "give the competition's sample_submission.csv")])
        text = path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError([Problem(FLAG, f"cannot read {str(path)!r}: {type(exc).__name__}: "
                                 f"{getattr(exc, 'strerror', None) or exc}",
                                 "give the competition's sample_submission.csv (UTF-8 CSV)", str(path))]) from None
    return parse_sample(text, class_names, where=f"{FLAG} {path}")


def relative_name(path: Path, data: Path) -> str:
    """The image's name as a POSIX path under the folder (the file name when `data` is one image)."""
    return (path.relative_to(data) if data.is_dir() else Path(path.name)).as_posix()


def predict_run(run: Path | str, data: Path | str, *, sample_submission: Path | str | None = None,
                probabilities: bool = False, batch: int = 64) -> Predicted:
    """The trained model of `run` on the images under `data`, laid out as `sample_submission` asks (or today's
    file, class, confidence rows; `probabilities`: one column per class)."""
    import torch

    from fasttrain.datasets.inference import batches, image_files
    from fasttrain.models.prediction import class_probabilities
    from fasttrain.models.saved import load_trained

    if batch < 1:
        raise UserError([Problem("--batch", f"{batch} images per forward pass", "give 1 or more", str(batch))])
    run, data = Path(run), Path(data)
    model, meta = load_trained(run)
    names = [str(n) for n in meta["class_names"]]
    sample = read_sample(Path(sample_submission), names) if sample_submission is not None else None
    files = image_files(data)
    name_of = {f: relative_name(f, data) for f in files}  # each file's name under --data, made once
    dropped: list[str] = []  # the images the sample does not name, left out before reading
    if sample is not None:  # before any image is read: ids with no image stop here; only named images are read
        order, dropped = match_ids(sample.ids, list(name_of.values()))
        files = [files[k] for k in sorted(order)]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    read, probs, unreadable = class_probabilities(
        model, batches(files, int(meta["image_size"]), float(meta.get("crop_pct", 0.875)), meta["mean"],
                       meta["std"], batch), device)
    if sample is not None and unreadable:
        shown = ", ".join(str(p) for p, _ in unreadable[:3])
        more = f" and {len(unreadable) - 3:,} more" if len(unreadable) > 3 else ""
        raise UserError([Problem(FLAG, f"{len(unreadable):,} image(s) the sample names cannot be read, so their rows "
                                 f"would be missing: {shown}{more} ({unreadable[0][1]})",
                                 "replace or repair those files (a scorer rejects a submission with rows missing)")])
    submission = lay_out([name_of[p] for p in read], probs, names, sample, per_class=probabilities)
    if sample is not None:
        submission = Submission(submission.columns, submission.rows, dropped)
    return Predicted(submission, meta, unreadable)
