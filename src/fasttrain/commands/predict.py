"""`fasttrain predict RUN --data DIR`: the trained model of a run on new images -> a CSV of file, class, confidence.

gather: the run's model.json and model.safetensors (models/saved.py), the image files (datasets/inference.py);
compute: the model in eval mode, softmax, the top class; render: CSV on stdout or --out, a one-line account on
stderr, or --json. Imports torch inside the command only (cli.py imports this file for --help).
"""
from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from typing import Optional

import typer

from fasttrain.commands import options


def register(app: typer.Typer) -> None:
    app.command("predict")(predict_cmd)


def predict_cmd(
    run: Path = typer.Argument(..., metavar="RUN", help="A run folder (runs/NAME) that has model.json."),
    data: Path = typer.Option(..., "--data", "-d", metavar="DIR", help="A folder of images (any layout) or one image."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", metavar="CSV", help="Write the CSV here, not to stdout."),
    batch: int = typer.Option(64, "--batch", min=1, max=4096, help="Images per forward pass."),
    as_json: bool = options.json_option(),
) -> None:
    """The trained model of RUN on the images under DIR: one CSV row per image (file, class, confidence)."""
    import torch

    from fasttrain.core.console import print_json
    from fasttrain.datasets.inference import batches, image_files
    from fasttrain.models.saved import load_trained

    model, meta = load_trained(run)
    files = image_files(data)
    names, rows, unreadable = meta["class_names"], [], []
    with torch.inference_mode():
        for read, images, bad in batches(files, int(meta["image_size"]), float(meta.get("crop_pct", 0.875)),
                                         meta["mean"], meta["std"], batch):
            unreadable += bad
            if images is None:
                continue
            confidence, index = torch.softmax(model(images).float(), dim=1).max(dim=1)
            for path, c, i in zip(read, confidence.tolist(), index.tolist()):
                shown = path.relative_to(data) if data.is_dir() else path
                rows.append({"file": str(shown), "class": names[i] if i < len(names) else str(i), "confidence": c})
    if as_json:
        print_json({"run": str(run), "weights": meta.get("weights"), "from": meta.get("from"), "predictions": rows,
                    "unreadable": [{"file": str(p), "reason": r} for p, r in unreadable]})
        return
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=["file", "class", "confidence"], lineterminator="\n")
    writer.writeheader()
    writer.writerows({**r, "confidence": f"{r['confidence']:.4f}"} for r in rows)
    if out is not None:
        from fasttrain.core.files import write_text_atomic
        write_text_atomic(out, text.getvalue())
    else:
        sys.stdout.write(text.getvalue())
    where = f"; CSV in {out}" if out is not None else ""
    skipped = f"; {len(unreadable)} unreadable file(s) skipped, e.g. {unreadable[0][0]}" if unreadable else ""
    print(f"fasttrain: predicted {len(rows):,} image(s) under {data} with {run}/{meta.get('weights')} "
          f"({meta['model']}, from {meta.get('from', '?')}){where}{skipped}", file=sys.stderr)
