"""A competition's sample submission read, and predictions laid out as it asks: pure functions, no model.

The sample's first column is the id, as the competition writes it (a file name with or without its extension,
or a path relative to the test folder); its second column is the label, or every other column is a class name
(one probability per class). Rows come out in the sample's order, under its column names. Sample ids that no
image matches are an error (a scorer rejects a submission without them); images the sample does not name are
dropped, and said, since a scorer rejects extra rows too. Without a sample: today's `file,class,confidence`
rows, or `file` and one probability column per class with `probabilities`.
"""
from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from fasttrain.core.errors import Problem, UserError

FLAG = "--sample-submission"
MAX_SAMPLE_BYTES = 512 * 1024 * 1024  # a sample of ids and one label is megabytes; more is not a sample
EXAMPLES = 3                           # ids or files named in an error line


@dataclass(frozen=True)
class Sample:
    """What a sample submission asks for: its columns, its ids in order, and whether it wants probabilities."""

    columns: list[str]
    ids: list[str]
    per_class: bool


@dataclass(frozen=True)
class Submission:
    """Rows ready to write: `columns` in order, `rows` as dicts; `dropped`: images the sample does not name."""

    columns: list[str]
    rows: list[dict[str, object]]
    dropped: list[str] = field(default_factory=list)


def _examples(items: Sequence[str]) -> str:
    shown = ", ".join(repr(i) for i in items[:EXAMPLES])
    return shown + (f" and {len(items) - EXAMPLES:,} more" if len(items) > EXAMPLES else "")


def parse_sample(text: str, class_names: Sequence[str], where: str = FLAG) -> Sample:
    """The sample submission in `text` (CSV with a header) -> Sample; a UserError for anything else."""
    def bad(what: str, fix: str = "give the competition's sample_submission.csv (a header, then one row an "
                                  "image: its id first)") -> UserError:
        return UserError([Problem(where, what, fix)])

    try:
        table = [row for row in csv.reader(io.StringIO(text)) if any(cell.strip() for cell in row)]
    except csv.Error as exc:
        raise bad(f"not a readable CSV: {exc}") from None
    if not table:
        raise bad("empty: no header and no rows")
    columns = [c.strip() for c in table[0]]
    columns[0] = columns[0].lstrip("\ufeff")
    if len(columns) < 2 or not all(columns):
        raise bad(f"the header {','.join(columns)!r} needs an id column then a label column (or one column a "
                  "class), all named")
    if len(set(columns)) != len(columns):
        raise bad(f"the header {','.join(columns)!r} names a column twice")
    ids = [row[0].strip() if row else "" for row in table[1:]]
    if not ids:
        raise bad(f"no rows under the header {','.join(columns)!r}: nothing says which ids to write")
    if "" in ids:
        raise bad(f"row {ids.index('') + 2} has no id in its first column ({columns[0]!r})")
    seen: set[str] = set()
    twice: list[str] = []  # every repeat, in the order they come
    for i in ids:
        if i in seen:
            twice.append(i)
        seen.add(i)
    if twice:
        raise bad(f"{len(twice):,} id(s) appear more than once, e.g. {_examples(twice)}")
    rest, names = columns[1:], set(class_names)
    if (len(rest) == 1 and rest[0] not in names) or (len(rest) == 1 and len(names) == 1):
        return Sample(columns, ids, per_class=False)
    if set(rest) == names:
        return Sample(columns, ids, per_class=True)
    unknown, missing = [c for c in rest if c not in names], [c for c in class_names if c not in rest]
    raise bad(f"{len(columns)} columns ({_examples(columns)}): neither an id and one label column nor an id and "
              f"one column per class of this model ({len(unknown)} unknown: {_examples(unknown) or 'none'}; "
              f"{len(missing)} classes missing: {_examples(missing) or 'none'})",
              "give the sample submission of the competition this run's classes come from")


def id_keys(relative: str) -> list[str]:
    """The ways a sample may name the image at `relative` (a POSIX path under the test folder), most exact first:
    the path, the path without its extension, the file name, the file name without its extension."""
    path = PurePosixPath(relative)
    stem_path = str(path.with_suffix("")) if path.suffix else str(path)
    return list(dict.fromkeys([str(path), stem_path, path.name, path.stem]))


def match_ids(ids: Sequence[str], files: Sequence[str]) -> tuple[list[int], list[str]]:
    """(for each sample id the index of its file, the files no id names). The naming the sample uses (see id_keys)
    is the one that matches the most ids; a UserError when ids have no image or two images answer to one id."""
    best: tuple[int, dict[str, list[int]]] = (-1, {})
    for kind in range(4):
        table: dict[str, list[int]] = {}
        for index, name in enumerate(files):
            keys = id_keys(name)
            table.setdefault(keys[min(kind, len(keys) - 1)], []).append(index)
        hits = sum(i in table for i in ids)
        if hits > best[0]:
            best = (hits, table)
    table = best[1]
    missing = [i for i in ids if i not in table]
    if missing:
        raise UserError([Problem(FLAG, f"{len(missing):,} of the sample's {len(ids):,} ids have no image under "
                                 f"--data, e.g. {_examples(missing)}", "point --data at the test images the "
                                 "sample submission lists (ids match a file's name, with or without extension, or "
                                 "its path under --data)")])
    shared = [i for i in ids if len(table[i]) > 1]
    if shared:
        clash = [files[k] for k in table[shared[0]]]
        raise UserError([Problem(FLAG, f"{len(shared):,} id(s) match more than one image, e.g. {shared[0]!r}: "
                                 f"{_examples(clash)}", "keep one image per id under --data")])
    order = [table[i][0] for i in ids]
    named = set(order)
    return order, [f for k, f in enumerate(files) if k not in named]


def fmt_probability(p: float) -> str:
    return f"{p:.6f}"


def lay_out(files: Sequence[str], probabilities: Sequence[Sequence[float]], class_names: Sequence[str],
            sample: Sample | None, *, per_class: bool = False) -> Submission:
    """Rows for `files` (POSIX paths under the test folder) and each one's class probabilities, as `sample` asks,
    or per_class. Pure."""
    def top(k: int) -> tuple[str, float]:
        probs = probabilities[k]
        best = max(range(len(probs)), key=probs.__getitem__)
        return (class_names[best] if best < len(class_names) else str(best)), float(probs[best])

    if sample is None:
        if per_class:
            columns = ["file", *class_names]
            rows = [{"file": f, **dict(zip(class_names, map(float, probabilities[k]), strict=True))}
                    for k, f in enumerate(files)]
            return Submission(columns, rows)
        rows = [{"file": f, "class": c, "confidence": p} for k, f in enumerate(files) for c, p in [top(k)]]
        return Submission(["file", "class", "confidence"], rows)
    order, dropped = match_ids(sample.ids, files)
    id_column = sample.columns[0]
    if per_class or sample.per_class:
        columns = sample.columns if sample.per_class else [id_column, *class_names]
        position = {name: index for index, name in enumerate(class_names)}  # once, not a search per cell
        rows = [
            {id_column: i, **{c: float(probabilities[k][position[c]]) for c in columns[1:]}}
            for i, k in zip(sample.ids, order, strict=True)
        ]
        return Submission(columns, rows, dropped)
    label = sample.columns[1]
    return Submission(
        sample.columns[:2], [{id_column: i, label: top(k)[0]} for i, k in zip(sample.ids, order, strict=True)], dropped
    )


def csv_text(submission: Submission) -> str:
    """The rows as CSV text (probabilities with 6 decimals, today's confidence with 4)."""
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=submission.columns, lineterminator="\n")
    writer.writeheader()
    for row in submission.rows:
        writer.writerow(
            {
                k: (
                    f"{v:.4f}"
                    if k == "confidence" and "class" in row and isinstance(v, float)
                    else fmt_probability(v)
                    if isinstance(v, float)
                    else v
                )
                for k, v in row.items()
            }
        )
    return text.getvalue()
