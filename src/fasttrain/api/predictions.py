"""`fasttrain.predict(run, data)`: a run's model on a folder of images from Python, as `fasttrain predict` computes
it (datasets/predict_run.py; the command is not run), returned as `Predictions`: rows ready for a DataFrame or a
submission file, shown as a table in a notebook."""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from fasttrain.datasets.predict_run import Predicted, predict_run
from fasttrain.datasets.submission import csv_text

SHOWN_ROWS = 10  # rows a notebook shows; the rest are counted


class Predictions:
    """One row per image (dicts under `columns`): the file or the sample's id, then the class (and confidence)
    or one probability per class. `dropped`: images the sample submission does not name; `unreadable`: (file,
    reason) of images skipped."""

    def __init__(self, predicted: Predicted):
        self._predicted = predicted
        self.columns: list[str] = list(predicted.submission.columns)
        self.rows: list[dict[str, Any]] = [dict(r) for r in predicted.submission.rows]
        self.dropped: list[str] = list(predicted.submission.dropped)
        self.unreadable: list[tuple[Path, str]] = list(predicted.unreadable)
        self.meta: dict[str, Any] = dict(predicted.meta)

    def __len__(self) -> int:
        return len(self.rows)

    def to_dataframe(self) -> Any:
        """The rows as a pandas DataFrame (pandas must be installed)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Predictions.to_dataframe() needs pandas: pip install pandas "
                              "(or use .rows, a list of dicts, or .to_csv(path))") from None
        return pd.DataFrame(self.rows, columns=self.columns)

    def csv(self) -> str:
        """The CSV text `fasttrain predict` writes for the same arguments."""
        return csv_text(self._predicted.submission)

    def to_csv(self, path: str | Path) -> Path:
        """Write the CSV atomically (never a partial file) -> its path."""
        from fasttrain.core.files import write_text_atomic

        write_text_atomic(Path(path), self.csv())
        return Path(path)

    def __repr__(self) -> str:
        return f"Predictions({len(self):,} rows, columns={self.columns})"

    def _repr_html_(self) -> str:  # IPython's display protocol: the first rows as a table
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(_shown(r.get(c)))}</td>" for c in self.columns) + "</tr>"
                       for r in self.rows[:SHOWN_ROWS])
        more = f"<p>{len(self) - SHOWN_ROWS:,} more rows</p>" if len(self) > SHOWN_ROWS else ""
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{more}"


def _shown(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def predict(run: str | Path, data: str | Path, *, sample_submission: str | Path | None = None,
            probabilities: bool = False, batch: int = 64) -> Predictions:
    """The trained model of `run` (a run folder) on the images under `data`, as `fasttrain predict` computes it:
    with `sample_submission` its ids, order and columns; `probabilities`: one column per class. Bad input raises
    fasttrain's UserError with one line per problem."""
    return Predictions(predict_run(run, data, sample_submission=sample_submission, probabilities=probabilities,
                                   batch=batch))
