"""`fasttrain predict RUN --data DIR`: the trained model of a run on new images -> a CSV of file, class, confidence,
or with --sample-submission a competition's submission (its ids, order and columns).

gather and compute: datasets/predict_run.py (the run's model files, the sample, the images preprocessed as the run
validated them, the model over them, datasets/submission.py's layout); render: CSV on stdout or --out (written
atomically: never a partial file), a one-line account on stderr, or --json. Imports torch inside the command
only (cli.py imports this file for --help).
"""
from __future__ import annotations

import sys
from pathlib import Path

import typer

from fasttrain.commands import options


def register(app: typer.Typer) -> None:
    app.command("predict")(predict_cmd)


def predict_cmd(
    run: Path = typer.Argument(..., metavar="RUN", help="A run folder (runs/NAME) that has model.json."),
    data: Path = typer.Option(..., "--data", "-d", metavar="DIR", help="A folder of images (any layout) or one image."),
    out: Path | None = typer.Option(None, "--out", "-o", metavar="CSV", help="Write the CSV here, not to stdout."),
    sample_submission: Path | None = typer.Option(
        None, "--sample-submission", metavar="CSV", help="A competition's sample submission: write its ids, in its "
        "order, under its column names (an id column then a label column, or one column per class)."),
    probabilities: bool = typer.Option(False, "--probabilities", help="One column per class (its probability) "
                                       "instead of the top class."),
    batch: int = typer.Option(64, "--batch", min=1, max=4096, help="Images per forward pass."),
    as_json: bool = options.json_option(),
) -> None:
    """The trained model of RUN on the images under DIR: one CSV row per image (file, class, confidence), or a
    submission laid out as --sample-submission asks."""
    from fasttrain.core.console import print_json
    from fasttrain.datasets.predict_run import predict_run
    from fasttrain.datasets.submission import csv_text

    result = predict_run(run, data, sample_submission=sample_submission, probabilities=probabilities, batch=batch)
    submission, meta, unreadable = result.submission, result.meta, result.unreadable
    if as_json:
        print_json({"run": str(run), "weights": meta.get("weights"), "from": meta.get("from"),
                    "columns": submission.columns, "predictions": submission.rows, "dropped": submission.dropped,
                    "unreadable": [{"file": str(p), "reason": r} for p, r in unreadable]})
        return
    text = csv_text(submission)
    if out is not None:
        from fasttrain.core.files import write_text_atomic
        write_text_atomic(out, text)
    else:
        sys.stdout.write(text)
    where = f"; CSV in {out}" if out is not None else ""
    skipped = f"; {len(unreadable)} unreadable file(s) skipped, e.g. {unreadable[0][0]}" if unreadable else ""
    dropped = (f"; {len(submission.dropped):,} image(s) not in the sample submission left out, e.g. "
               f"{submission.dropped[0]}" if submission.dropped else "")
    from fasttrain.ui.wrap import for_stream
    line = (f"fasttrain: predicted {len(submission.rows):,} image(s) under {data} with {run}/{meta.get('weights')} "
            f"({meta['model']}, from {meta.get('from', '?')}){where}{skipped}{dropped}")
    print(for_stream(line, sys.stderr), file=sys.stderr)  # on a terminal: broken between words, not inside one
