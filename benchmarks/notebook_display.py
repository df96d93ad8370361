"""What the notebook display (ui/notebook.py) costs the training thread, beside the terminal's live redraw.

One notebook redraw lays out the dashboard's screen (the same renderable the terminal draws), exports it as text and
HTML, and hands the bundle to the notebook (here to a list: the kernel's message send is not counted). It happens at
most once every REFRESH_S seconds while steps run, so its share of the training thread's time is
redraw_time / REFRESH_S. The terminal redraws at most REFRESH_PER_SECOND times a second. Both are timed in this one
process, interleaved: each round times every variant once in a shuffled order; reported are medians over rounds.

Run: .venv/bin/python benchmarks/notebook_display.py [--rounds 30 --draws 20]
"""
from __future__ import annotations

import argparse
import io
import random
import statistics
import time

from rich.console import Console

from fasttrain.hardware.report import CpuInfo, HardwareReport, MemoryInfo
from fasttrain.plan import make_plan
from fasttrain.profiles import presets
from fasttrain.telemetry.recorder import Telemetry
from fasttrain.telemetry.step_record import StepRecord
from fasttrain.train.loop.events import RunDisplay, RunEnd, StepEvent
from fasttrain.ui.dashboard import REFRESH_PER_SECOND, Dashboard
from fasttrain.ui.notebook import REFRESH_S, NotebookDisplay

ROW = {"epoch": 1, "train_loss": 0.5123, "val_loss": 0.61, "val_acc1": 0.873, "val_acc5": 0.99, "lr": 0.01,
       "images_per_s": 712.3, "data_wait_fraction": 0.04, "time_s": 63.2, "train_s": 58.1, "val_s": 5.1}


def _state() -> tuple[RunDisplay, dict, StepRecord]:
    report = HardwareReport(cpu=CpuInfo(logical_cores=2), memory=MemoryInfo(ram_total_bytes=8 << 30,
                                                                            ram_available_bytes=6 << 30))
    plan = make_plan(presets.resolve("cpu").profile, report, dataset_size=50_000)
    tel = Telemetry("cpu")
    rec = StepRecord(0, 0, 0, 700, 64, 0.001, 0.0, 0.009, loss=1.0, lr=0.1, grad_norm=2.0, batch_size=64)
    for i in range(100):
        tel.record(StepRecord(0, i, i % 700, 700, 64, 0.001, 0.0, 0.009, loss=1.0, lr=0.1, grad_norm=2.0,
                              batch_size=64))
    spec = RunDisplay(plan, total_batches=700 * 8, epochs=8, stream=io.StringIO(), report=report, telemetry=tel,
                      forecast={"images_per_s": 700.0, "step_time_s": 0.01}, quiet=False, plain=False)
    return spec, tel.snapshot(), rec


def variants(spec: RunDisplay, snap: dict, rec: StepRecord) -> tuple[dict, int]:
    """-> (variant: its redraw, the bytes one notebook redraw sends)."""
    shown: list = []
    notebook = NotebookDisplay(spec, show=shown.append)
    notebook.on_step(StepEvent(rec, snap))
    terminal = Dashboard(spec.plan, total_batches=spec.total_batches, epochs=spec.epochs, mode="live",
                         console=Console(file=io.StringIO(), force_terminal=True, width=110), report=spec.report,
                         forecast=spec.forecast)
    terminal.update(snap, rec)  # not entered: Rich's Live would take over stdout; its redraw is render + print
    for epoch in range(1, 9):  # a full epoch table: the largest screen either draws
        notebook.on_epoch_end({**ROW, "epoch": epoch})
        terminal.epoch_end({**ROW, "epoch": epoch})
    notebook.on_run_end(RunEnd({}, {"run_dir": "runs/x", "epochs_run": 8, "best_val_acc1": 0.9}))
    notebook.end = None  # time the redraw during training, without the final summary table
    notebook.draw()
    sent = sum(len(v.encode()) for v in shown[-1].values())
    return {"notebook redraw (layout + text + HTML)": notebook.draw, "terminal live redraw": terminal.render}, sent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--draws", type=int, default=20, help="redraws timed per variant per round")
    args = ap.parse_args()
    spec, snap, rec = _state()
    fns, sent = variants(spec, snap, rec)
    console = Console(file=io.StringIO(), force_terminal=True, width=110)
    terminal = fns["terminal live redraw"]
    fns["terminal live redraw"] = lambda: console.print(terminal())  # the layout and its writing, as Live does
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns)
    rng = random.Random(0)
    for fn in fns.values():
        fn()  # warm each path once
    for _ in range(args.rounds):
        rng.shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            for _ in range(args.draws):
                fns[name]()
            times[name].append((time.perf_counter() - t0) / args.draws)
    ms = {name: statistics.median(ts) * 1000 for name, ts in times.items()}
    note, term = ms["notebook redraw (layout + text + HTML)"], ms["terminal live redraw"]
    print(f"{'variant':40} {'ms/redraw':>10} {'redraws/s (max)':>16} {'share of the training thread':>30}")
    print(f"{'notebook redraw (layout + text + HTML)':40} {note:10.2f} {1 / REFRESH_S:16.1f} "
          f"{note / 1000 / REFRESH_S:30.2%}")
    print(f"{'terminal live redraw':40} {term:10.2f} {REFRESH_PER_SECOND:16.1f} "
          f"{term / 1000 * REFRESH_PER_SECOND:30.2%}")
    print(f"\neach notebook redraw sends {sent / 1024:.0f} KiB (text + HTML) to the notebook")
    print(f"notebook / terminal time per redraw: {note / term:.2f}x (medians of {args.rounds} interleaved rounds "
          f"x {args.draws} redraws)")


if __name__ == "__main__":
    main()
