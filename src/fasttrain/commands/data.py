"""`fasttrain data prepare`: gather (the source tree, DST's state) -> the shard jobs (datasets/prepare.py) -> render
(a Rich progress bar with images/s and ETA on a terminal, a plain line every few seconds off it, or --json).

Exit 0 when the set is ready, 2 for bad input, 130 when interrupted (SIGINT or SIGTERM): finished shards stay in
DST and the same command resumes. Imports nothing heavy at module level: cli.py imports this file for --help.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from fasttrain.commands import options
from fasttrain.core.errors import Problem, UserError

if TYPE_CHECKING:
    from fasttrain.datasets.prepare import Outcome

SRC_FIX = ("give an image folder (train/ and val/ with a sub-folder per class, or one tree of class sub-folders) "
           "or a labels table (train.csv beside its images)")

data_app = typer.Typer(help="Prepare data sets: pack an image folder into resized WebDataset shards that load "
                            "several times faster.", no_args_is_help=True)
PLAIN_EVERY_S = 5.0


def register(app: typer.Typer) -> None:
    app.add_typer(data_app, name="data")


@data_app.command("prepare")
def prepare_cmd(
    src: Path = typer.Argument(..., metavar="SRC", help="ImageFolder tree (train/ and val/, or one tree of classes) "
                                                        "or a labels table (train.csv)."),
    out: Path = typer.Option(..., "--out", "-o", metavar="DST", help="Folder for the shards and manifest.json."),
    image_size: int = typer.Option(224, "--image-size", min=8, max=16384,
                                   help="Largest training crop this set will serve."),
    scale: float = typer.Option(1.15, "--scale", min=1.0, max=4.0,
                                help="Short side kept = scale x image size (headroom for crops)."),
    shard_size: int = typer.Option(1000, "--shard-size", min=1, max=1_000_000, help="Images per tar shard."),
    workers: int | None = typer.Option(None, "--workers", min=1, max=1024,
                                          help="Processes (default: one per core)."),
    sets: list[str] | None = typer.Option(None, "--set", metavar="KEY=VALUE",
                                             help="A labels table's data.image_column, data.label_column or "
                                                  "data.images_dir, as train takes them (repeatable)."),
    as_json: bool = options.json_option(),
) -> None:
    """Convert SRC into WebDataset tar shards in DST, images resized once (short side = scale x image size), with
    the same classes and validation split as `train --data SRC`. Resumable: rerun after an interruption.
    Then use --data DST in train, estimate, bench loader and doctor."""
    from fasttrain.datasets.prepare import prepare

    if out.resolve() == src.resolve() or src.resolve() in out.resolve().parents:
        raise UserError([Problem("--out", "DST must not lie inside SRC (the shards would become source images)",
                                 "choose a folder outside the source tree", str(out))])
    spec = _data_spec(sets)
    show = _progress(quiet=as_json)
    try:
        outcome = prepare(src, out, image_size=image_size, scale=scale, shard_size=shard_size, workers=workers,
                          progress=show, spec=spec)
    except UserError as exc:  # the folder checks are train's and name its --data; here the folder is SRC
        show.stop()
        raise UserError([dataclasses.replace(p, where="SRC", fix=SRC_FIX) if p.where.startswith("--data") else p
                         for p in exc.problems], title=exc.title) from exc
    except KeyboardInterrupt:
        show.stop()
        print(f"interrupted: finished shards are kept in {out}; run the same command again to finish",
              file=sys.stderr, flush=True)
        raise typer.Exit(130) from None
    show.stop()
    result = summary(outcome, out)
    if as_json:
        from fasttrain.core.console import print_json

        print_json(result)
        return
    render(result)


def _data_spec(sets: list[str] | None) -> Any:
    """The profile's data: section with `--set data.*` applied (a labels table's columns and folder); None when
    nothing is set. Other keys are train's, not this command's: refused."""
    if not sets:
        return None
    other = next((s for s in sets if not s.strip().startswith("data.")), None)
    if other is not None:
        raise UserError([Problem("--set", "data prepare takes only the data.* keys (a labels table's columns and "
                                 "folder)", "set the others on train", other)])
    from fasttrain.profiles.presets import resolve
    return resolve("cpu", sets=sets).profile.data


def summary(outcome: Outcome, out: Path) -> dict[str, Any]:
    """What `data prepare --json` prints: counts, bad files, shards and the timing (pure)."""
    m = outcome.manifest
    images = m["splits"]["train"]["count"] + m["splits"]["val"]["count"]
    return {"out": str(out), "source": m["source"], "classes": len(m["classes"]), "image_size": m["image_size"],
            "short_side": m["short_side"], "train": m["splits"]["train"]["count"],
            "val": m["splits"]["val"]["count"], "images": images, "bad_files": m["bad_files"],
            "shards": sum(len(m["splits"][s]["shards"]) for s in ("train", "val")),
            "shards_written": outcome.written_shards, "shards_resumed": outcome.skipped_shards,
            "already_done": outcome.already_done, "seconds": outcome.seconds,
            "images_per_s": None if outcome.already_done else images / max(outcome.seconds, 1e-9),
            "checksum": m["checksum"]}


def render(r: dict[str, Any]) -> None:
    from fasttrain.core.console import console
    from fasttrain.core.format import fmt_duration, plural

    out = console()
    if r["already_done"]:
        out.print(f"{r['out']} is already prepared from {r['source']} (checksum {r['checksum'][:12]}); nothing to do")
    else:
        out.print(f"prepared {plural(r['images'], 'image')} ({r['train']} train, {r['val']} val, "
                  f"{plural(r['classes'], 'class', 'classes')}) into {plural(r['shards'], 'shard')} in {r['out']} "
                  f"in {fmt_duration(r['seconds'])} ({r['images_per_s']:.0f} images/s)"
                  + (f"; {r['shards_resumed']} shards kept from an earlier run" if r["shards_resumed"] else ""))
        out.print(f"short side {r['short_side']} px for crops up to {r['image_size']} px; checksum "
                  f"{r['checksum'][:12]}")
    if r["bad_files"]:
        out.print(f"{plural(len(r['bad_files']), 'unreadable file')} left out:")
        for b in r["bad_files"][:20]:
            out.print(f"  {b['path']}: {b['reason']}")
        if len(r["bad_files"]) > 20:
            out.print(f"  ... and {len(r['bad_files']) - 20} more (manifest.json lists them all)")
    out.print(f"use it: fasttrain train --data {r['out']}   (or bench loader / estimate / doctor --data)")


class _progress:
    """The progress callback: Rich's bar (images/s, ETA) on a terminal, plain lines on stderr otherwise."""

    def __init__(self, quiet: bool):
        from fasttrain.core.console import is_tty

        self.quiet = quiet
        self.tty = is_tty(sys.stderr) and not quiet
        self.bar: Any = None
        self.task: Any = None
        self.started = time.perf_counter()
        self.first_done: int | None = None
        self.last_line = 0.0

    def __call__(self, done: int, total: int, shards: int) -> None:
        if self.first_done is None:
            self.first_done = done
        if self.tty:
            self._rich(done, total)
        elif not self.quiet and (time.perf_counter() - self.last_line >= PLAIN_EVERY_S or done >= total):
            self.last_line = time.perf_counter()
            print(f"  {self.line(done, total, shards)}", file=sys.stderr, flush=True)

    def line(self, done: int, total: int, shards: int) -> str:
        from fasttrain.core.format import fmt_duration

        elapsed = time.perf_counter() - self.started
        rate = (done - (self.first_done or 0)) / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else None
        return (f"{done}/{total} images ({done / max(total, 1):.0%}), {shards} shards done, {rate:.0f} images/s, "
                f"ETA {fmt_duration(eta)}")

    def _rich(self, done: int, total: int) -> None:
        if self.bar is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.bar = Progress(TextColumn("preparing"), BarColumn(), MofNCompleteColumn(), TaskProgressColumn(),
                                TextColumn("{task.fields[rate]} images/s"), TimeElapsedColumn(), TextColumn("ETA"),
                                TimeRemainingColumn(), console=Console(stderr=True))
            self.bar.start()
            self.task = self.bar.add_task("prepare", total=total, completed=done, rate="-")
        elapsed = time.perf_counter() - self.started
        rate = (done - (self.first_done or 0)) / elapsed if elapsed > 0 else 0.0
        self.bar.update(self.task, completed=done, rate=f"{rate:.0f}")

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
