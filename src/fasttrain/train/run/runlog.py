"""The run directory: resolved profile (YAML), metrics.jsonl, TensorBoard event files, summary.json.

Layout of runs/<name>/:
  profile.yaml     the profile exactly as resolved for this run (after extends, --set, env, flags)
  metrics.jsonl    one JSON object per line: {"kind": "step"|"epoch", "time": <unix seconds>, ...}
  tb/              TensorBoard event files (`tensorboard --logdir runs`)
  summary.json     the final summary (what `train --json` prints)
  .lock            flock'ed by the one process writing this run (lock.py): pid, host, start time
On resume, rows logged after the checkpoint are dropped (log_trim.py) and TensorBoard purges past its step.
A write the disk refuses (ENOSPC) warns once per file and the run goes on (checkpoints are still tried).
Checkpoints are written next to these by the loop.

Cost on the training thread: log_step() is one json.dumps and one line-buffered write (a few
microseconds); TensorBoard's protobuf encoding and its import (~1 s) run on a background thread.
Non-finite floats (a diverged loss) are written as null so every line is strict JSON.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import re
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from fasttrain.core.diskspace import disk_full, disk_write_error
from fasttrain.core.errors import Problem, UserError
from fasttrain.core.files import write_text_atomic
from fasttrain.train.loop.epoch_row import EpochRow
from fasttrain.train.run.lock import RunLock
from fasttrain.train.run.log_trim import truncate_metrics
from fasttrain.train.run.summary_record import RunSummary
from fasttrain.train.run.writer_threads import quiet_writer_threads
from fasttrain.train.state.run_state import Position

METRICS_FILE = "metrics.jsonl"
PROFILE_FILE = "profile.yaml"
SUMMARY_FILE = "summary.json"
TB_DIR = "tb"
# Run names become directory names: keep them portable.
_NAME_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
# Suffixes tried before giving up on finding a free run name (the 1000th clash means something is wrong).
MAX_SUFFIX = 999


def new_run_dir(base: Path, name: str | None, *, profile: str = "run", resume: bool = False,
                now: datetime | None = None) -> Path:
    """Create and return the run directory base/<name>.

    Naming rule: no name -> "<YYYYmmdd-HHMMSS>-<profile>". If that directory already exists and this
    is not a resume, the first free of "<name>-2", "<name>-3", ... is used, so a run never writes into
    another run's files. With resume=True an existing directory is reused as it is.
    """
    if name is None:
        name = f"{(now or datetime.now()):%Y%m%d-%H%M%S}-{profile}"
    elif not _NAME_OK.match(name):
        raise UserError([Problem("--run-name", "must be a plain directory name (letters, digits, . _ + -)",
                                 "pick a name without slashes or spaces", name)])
    base = Path(base)
    base.mkdir(parents=True, exist_ok=True)
    first = base / name
    if resume:
        first.mkdir(exist_ok=True)
        return first
    for n in range(1, MAX_SUFFIX + 1):
        candidate = first if n == 1 else base / f"{name}-{n}"
        try:
            candidate.mkdir()  # atomic: two runs started at once cannot both get the same directory
            return candidate
        except FileExistsError:
            continue
    raise UserError([Problem("--run-name", f"{MAX_SUFFIX} runs named like this already exist in {base}",
                             "choose another --run-name or clean up old runs", name)])


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf -> None, tensors and numpy scalars -> Python numbers, paths -> str."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    item = getattr(value, "item", None)
    if callable(item):
        try:
            return _clean(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return str(value)


def _scalars(record: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in record.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            and k not in ("time", "step", "epoch")}


class RunLog:
    """Writes one run's files. `tensorboard=False` skips the event files (and the tensorboard import)."""

    def __init__(self, run_dir: Path, *, tensorboard: bool = True, tb_flush_secs: float = 30.0,
                 resume_at: Position | None = None):
        """`resume_at`: the position of the checkpoint a resumed run continues from:
        rows the stopped process logged after it are dropped (truncate_metrics) and TensorBoard purges its
        events past that step. Takes the run folder's lock first (lock.py): a second process gets exit 2."""
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._lock = RunLock(self.run_dir).acquire()
        self.metrics_path = self.run_dir / METRICS_FILE
        self.disk_errors: list[str] = []
        self._purge_step: int | None = None
        if resume_at is not None:
            self._purge_step = resume_at.step + 1
            self._guarded(METRICS_FILE, lambda: truncate_metrics(self.metrics_path, resume_at.epoch, resume_at.batch))
        # Line-buffered: each record reaches the file as soon as it is written, so a crash loses nothing. Open for
        # the whole run (close() closes it), so no context manager.
        self._metrics = open(self.metrics_path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115  # see above
        self._metrics_ok = True
        self._metrics_size = self.metrics_path.stat().st_size
        self._tb_enabled = tensorboard
        self._tb_flush_secs = tb_flush_secs
        self._tb_queue: queue.Queue[tuple[str, dict[str, float], int] | None] | None = None
        self._tb_thread: threading.Thread | None = None
        self._tb_hook: Any = None
        self.tb_error: str | None = None
        self._steps_logged = 0
        self._closed = False

    def _disk_warning(self, name: str, exc: BaseException) -> None:
        """Warn once per file that it could not be written (a full disk); the run goes on."""
        if any(e.startswith(f"{name}:") for e in self.disk_errors):
            return
        full = disk_full(exc)
        cause = f"the disk is full ({full})" if full else f"{type(exc).__name__}: {str(exc)[:160]}"
        self.disk_errors.append(f"{name}: {cause}")
        then = "the run's result stands; its summary is only printed" if name == SUMMARY_FILE else \
            "the run goes on without it (checkpoints are still tried)"
        print(f"fasttrain: warning: could not write {self.run_dir / name}: {cause}; {then}", file=sys.stderr,
              flush=True)

    def _guarded(self, name: str, write: Any) -> Any:
        """Run `write()`; a write the file system refused (disk_write_error) becomes a warning and None."""
        try:
            return write()
        except Exception as exc:
            if not disk_write_error(exc):
                raise
            self._disk_warning(name, exc)
            return None

    # -- files ---------------------------------------------------------------------------------
    def write_profile(self, profile: dict[str, Any], header: str = "") -> Path:
        import yaml

        path = self.run_dir / PROFILE_FILE
        text = yaml.safe_dump(_clean(profile), sort_keys=False, default_flow_style=False)
        comment = "".join(f"# {line}\n" for line in header.splitlines()) if header else ""
        return self._guarded(PROFILE_FILE, lambda: write_text_atomic(path, comment + text))

    def write_summary(self, summary: RunSummary) -> Path | None:
        """None when the disk refused it (warned; the summary still reaches the display and --json)."""
        path = self.run_dir / SUMMARY_FILE
        data = summary.to_json()
        return self._guarded(SUMMARY_FILE, lambda: write_text_atomic(path, json.dumps(_clean(data), indent=2,
                                                                                  sort_keys=True) + "\n"))

    # -- metrics -------------------------------------------------------------------------------
    def log_step(self, record: dict[str, Any]) -> None:
        """One training step (the loop decides how often: every N steps)."""
        self._log("step", record)

    def log_epoch(self, row: EpochRow) -> None:
        self._log("epoch", row.to_json())

    def _log(self, kind: str, record: dict[str, Any]) -> None:
        if self._closed:
            raise RuntimeError("RunLog is closed")
        line = {"kind": kind, "time": time.time(), **record}
        if self._metrics_ok:
            self._write_row(json.dumps(_clean(line), separators=(",", ":")) + "\n")
        if self._tb_enabled:
            self._steps_logged += 1
            step = record.get("step")
            if kind == "epoch":
                step = record.get("epoch", step)
            self._tb_put(kind, _scalars(record), int(step) if isinstance(step, (int, float)) else self._steps_logged)

    def _write_row(self, text: str) -> None:
        """Append one row; on a full disk cut the file back to its last whole row, warn once, stop writing it."""
        try:
            self._metrics.write(text)
            self._metrics_size += len(text.encode("utf-8"))
        except OSError as exc:
            self._metrics_ok = False
            self._disk_warning(METRICS_FILE, exc)
            for cleanup in (self._metrics.close, lambda: os.truncate(self.metrics_path, self._metrics_size)):
                # close() drops what is left in the buffer (its flush fails again, the file is closed)
                with contextlib.suppress(OSError):
                    cleanup()

    # -- TensorBoard, off the training thread -------------------------------------------------
    def _tb_put(self, kind: str, scalars: dict[str, float], step: int) -> None:
        if self._tb_queue is None:
            self._tb_queue = queue.Queue()
            self._tb_thread = threading.Thread(target=self._tb_run, name="fasttrain-tensorboard", daemon=True)
            self._tb_thread.start()
        self._tb_queue.put((kind, scalars, step))

    def _tb_run(self) -> None:
        assert self._tb_queue is not None
        writer = None
        try:
            from torch.utils.tensorboard import SummaryWriter

            self._tb_hook = quiet_writer_threads()
            writer = SummaryWriter(log_dir=str(self.run_dir / TB_DIR), flush_secs=self._tb_flush_secs,
                                   purge_step=self._purge_step)
        except Exception as exc:
            self._tb_failed(exc)
        while True:
            item = self._tb_queue.get()
            if item is None:
                break
            if writer is None:
                continue
            kind, scalars, step = item
            prefix = "train" if kind == "step" else "epoch"
            try:
                for key, value in scalars.items():
                    writer.add_scalar(f"{prefix}/{key}", value, step)
            except Exception as exc:
                self._tb_failed(exc)
                writer = None
        if writer is not None:
            try:
                writer.close()
            except Exception as exc:
                self._tb_failed(exc)

    def _tb_failed(self, exc: BaseException) -> None:
        if disk_write_error(exc):
            self._disk_warning(TB_DIR, exc)
        self.tb_error = self.tb_error or f"TensorBoard logging off: {exc.__class__.__name__}: {exc}"

    def close(self) -> None:
        """Flush and close everything; joins the TensorBoard thread (safe to call twice)."""
        if self._closed:
            return
        self._closed = True
        if self._tb_queue is not None and self._tb_thread is not None:
            self._tb_queue.put(None)
            self._tb_thread.join(timeout=60)
        try:
            self._metrics.close()
        except OSError as exc:  # the last buffered row met a full disk
            self._disk_warning(METRICS_FILE, exc)
        if self._tb_hook is not None:
            self._tb_hook()
        self._lock.release()

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Every record of a metrics.jsonl (for tests, `estimate` comparisons and tools)."""
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
