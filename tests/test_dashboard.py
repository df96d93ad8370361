"""The dashboard in its three modes: plain lines without escape codes, the live Rich screen, quiet."""
from __future__ import annotations

import io
import itertools
import re
import threading

import pytest
from loop_helpers import Clock
from rich.console import Console

from fasttrain.core.format import fmt_clock
from fasttrain.hardware.report import CpuInfo, HardwareReport, MemoryInfo
from fasttrain.plan import make_plan
from fasttrain.profiles import presets
from fasttrain.telemetry.recorder import Telemetry
from fasttrain.telemetry.step_record import StepRecord
from fasttrain.train.loop.epoch_row import EpochRow
from fasttrain.train.run.summary import RunSummary
from fasttrain.ui import dashboard_format as dbf
from fasttrain.ui.dashboard import Dashboard, choose_mode

ESC = re.compile(r"\x1b|\[\d+m")
FORECAST = {"images_per_s": 800.0, "step_time_s": 0.08, "peak_memory_bytes": 6 * 2**30}


@pytest.fixture
def report() -> HardwareReport:
    return HardwareReport(cpu=CpuInfo(logical_cores=2),
                          memory=MemoryInfo(ram_total_bytes=8 * 2**30, ram_available_bytes=6 * 2**30))


@pytest.fixture
def plan(report: HardwareReport):
    return make_plan(presets.resolve("cpu").profile, report, dataset_size=6400)



class TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def telemetry_after(n: int, clock: Clock, *, wait: float = 0.01, compute: float = 0.09, epoch: int = 0,
                    tel: Telemetry | None = None) -> Telemetry:
    tel = tel or Telemetry("cpu", clock=clock, host_reader=lambda: {"host_ram_used_bytes": 3 * 2**30,
                                                                     "host_ram_available_bytes": 5 * 2**30})
    tel.sample_now()
    for i in range(n):
        clock.now += wait + compute
        tel.record(StepRecord(epoch, i, i % 100, 100, 64, wait, 0.0, compute, loss=1.5 - i / 1000, lr=0.1,
                              batch_size=64))
    return tel


def test_choose_mode() -> None:
    assert choose_mode(True, TTY()) == "quiet"
    assert choose_mode(False, TTY()) == "live"
    assert choose_mode(False, io.StringIO()) == "plain"   # a pipe, `| tee`, a CI log


def test_plain_mode_writes_throttled_lines_without_escape_codes(plan, report) -> None:
    out, clock = io.StringIO(), Clock()
    tel = telemetry_after(0, clock)
    with Dashboard(plan, total_batches=400, epochs=4, mode="plain", stream=out, plain_every_s=10.0,
                   report=report, forecast=FORECAST, clock=clock) as dash:
        for _ in range(300):  # 300 batches x 0.1 s = 30 s of training -> 3 periodic lines, not 300
            telemetry_after(1, clock, tel=tel)
            dash.update(tel.snapshot(), None)
        dash.epoch_end({"epoch": 1, "train_loss": 0.42, "val_loss": 0.5, "val_acc1": 0.91, "time_s": 30.0,
                        "telemetry_h2d_s": 0.0})
        dash.message("checkpoint saved")
        dash.close(RunSummary.from_json({"best_val_acc1": 0.91, "images_per_s": 640.0, "run_dir": "runs/x"}))
    text = out.getvalue()
    assert not ESC.search(text), "plain output must not contain terminal escape codes"
    lines = text.splitlines()
    periodic = [ln for ln in lines if ln.startswith("epoch 1/4 batch")]
    assert len(periodic) == 2  # at 10 s and 20 s after the first update (which only starts the clock)
    assert "10 it/s 640 img/s" in periodic[0] and "wait 10% h2d 0% compute 90%" in periodic[0]
    assert "RAM 3.0 GiB used" in periodic[0]
    assert lines[0].startswith("fasttrain: profile cpu | device cpu")
    assert any(ln.startswith("verdict: compute-bound: 90% of each step is compute") for ln in lines)
    # the epoch line shows the known columns; every telemetry_* total stays in metrics.jsonl
    assert "epoch done: epoch 1/4 | train loss 0.42 | val loss 0.5 | acc@1 91.0% | time 0:00:30" in lines
    assert "checkpoint saved" in lines
    assert lines[-3:] == ["  run folder       runs/x", "  accuracy         acc@1 - (best acc@1 91.0%)",
                          "  TensorBoard      tensorboard --logdir runs/x/tb"]


def test_plain_mode_pulls_from_telemetry_when_given_no_snapshot(plan) -> None:
    out, clock = io.StringIO(), Clock()
    tel = telemetry_after(30, clock)
    with Dashboard(plan, total_batches=100, epochs=1, mode="plain", stream=out, plain_every_s=1.0,
                   telemetry=tel, clock=clock) as dash:
        dash.update(None, None)
        clock.now += 2
        dash.update(None, None)
    assert "batch 30/100 (run 30%)" in out.getvalue()


def test_live_mode_renders_every_part(plan, report) -> None:
    buf, clock = io.StringIO(), Clock()
    console = Console(file=buf, force_terminal=True, width=160)
    tel = telemetry_after(50, clock, wait=0.07, compute=0.03)
    snap = tel.snapshot() | {"gpu_mem_allocated_bytes": 5 * 2**30, "gpu_mem_reserved_bytes": 6 * 2**30,
                             "gpu_mem_peak_bytes": 7 * 2**30, "gpu_util_pct": 12.0, "gpu_power_w": 71.0}
    with Dashboard(plan, total_batches=400, epochs=4, mode="live", console=console, report=report,
                   forecast=FORECAST) as dash:
        dash.update(snap, None)
        console.print(dash.render())
        dash.epoch_end({"epoch": 1, "train_loss": 0.42, "val_acc1": 0.91, "time_s": 30.0})
        dash.message("checkpoint saved")
        dash.close(RunSummary.from_json({"best_val_acc1": 0.91}))
    text = buf.getvalue()
    assert "\x1b[" in text  # a real terminal rendering
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    for part in ("epoch 1/4", "50/100 50%", "run 12%", "10 it/s", "640 img/s", "ETA 0:00:35", "loss", "AMP scale",
                 "5.0 alloc / 6.0 rsvd / 7.0 peak GiB", "12%, 71 W", "host RAM", "data wait", "70%",
                 "compute", "30%", "measured", "forecast", "0.80x", "verdict: input-bound: 70% of each step waits",
                 "epoch 1/4 | train loss 0.42", "91.0%", "checkpoint saved", "summary", "best acc@1 91.0%"):
        assert part in plain, part


def test_live_mode_redraws_inline_at_most_four_times_a_second(plan) -> None:
    buf, clock = io.StringIO(), Clock()
    console = Console(file=buf, force_terminal=True, width=120)
    tel = telemetry_after(30, Clock())
    threads_before = set(threading.enumerate())
    with Dashboard(plan, total_batches=400, epochs=4, mode="live", console=console, clock=clock) as dash:
        assert set(threading.enumerate()) == threads_before  # no refresh thread of Rich's
        for i in range(1, 101):  # 100 updates over one second of the injected clock
            clock.now = i / 100
            dash.update(tel.snapshot(), None)
        drawn = buf.getvalue().count("fasttrain  profile cpu")
    assert drawn == 1 + 4  # the first frame at start, then one per 0.25 s


def test_live_mode_survives_an_empty_and_a_broken_snapshot(plan) -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    with Dashboard(plan, total_batches=0, epochs=1, mode="live", console=console) as dash:
        console.print(dash.render())  # nothing measured yet
        dash.update({"it_per_s": "not a number", "batch_index": 0}, None)
        assert "dashboard error" in str(dash._render_safe())
    assert "epoch 1/1" in buf.getvalue()


def test_quiet_mode_prints_only_errors_and_the_summary(plan) -> None:
    out, clock = io.StringIO(), Clock()
    tel = telemetry_after(100, clock)
    with Dashboard(plan, total_batches=100, epochs=1, mode="quiet", stream=out, plain_every_s=0.0,
                   clock=clock) as dash:
        for _ in range(5):
            clock.now += 100
            dash.update(tel.snapshot(), None)
        dash.epoch_end({"epoch": 1, "val_acc1": 0.9})
        dash.message("checkpoint saved")
        dash.message("loss is NaN", level="error")
        dash.close(RunSummary.from_json({"best_val_acc1": 0.9}))
    assert out.getvalue().splitlines() == ["error: loss is NaN", "summary (all of it: summary.json in the run folder):",
                                           "  accuracy         acc@1 - (best acc@1 90.0%)"]


def test_measured_vs_forecast_ratio() -> None:
    snap = {"images_per_s": 600.0, "step_time_s": 0.1, "gpu_mem_peak_bytes": None}
    rows = dbf.measured_vs_forecast(snap, FORECAST | {"note": "text is ignored"})
    assert rows[0] == ("images_per_s", 600.0, 800.0, pytest.approx(0.75))
    assert rows[1] == ("step_time_s", 0.1, 0.08, pytest.approx(1.25))
    assert rows[2] == ("peak_memory_bytes", None, 6 * 2**30, None)  # no GPU: nothing measured


def test_epoch_columns_pick_known_keys_in_order() -> None:
    row = {"telemetry_h2d_s": 0.0, "val_acc1": 0.9, "epoch": 2, "telemetry_images_per_s": 640.0, "train_loss": 0.3,
           "telemetry_gpu_util_mean_pct": None}  # no GPU: an empty column is left out
    assert dbf.epoch_columns([row]) == ["epoch", "train_loss", "val_acc1", "telemetry_images_per_s"]
    assert dbf.epoch_columns([{"b": 1, "a": 2}]) == ["b", "a"]  # nothing known: show everything


def test_progress_and_eta_over_epochs() -> None:
    snap = {"epoch": 2, "batch_index": 9, "batches_in_epoch": 100, "step_time_s": 0.5}
    assert dbf.progress_of(snap, 400) == (210, 400)
    assert dbf.eta_s(snap, 400) == pytest.approx(190 * 0.5)
    assert fmt_clock(3725) == "1:02:05"
    assert (dbf.fmt_value("wall_s", 129.4), dbf.fmt_value("val_s", 10.06), dbf.fmt_value("step_time_s", 0.0123)) == \
        ("0:02:09", "10.1 s", "0.0123 s")
    assert (dbf.fmt_value("images_per_s", 640.0), dbf.fmt_value("peak_bytes", 3 * 2**30)) == ("640", "3.0 GiB")


def test_unknown_mode_is_refused(plan) -> None:
    with pytest.raises(ValueError):
        Dashboard(plan, total_batches=1, epochs=1, mode="fancy")


def test_the_real_loop_feeds_telemetry_dashboard_and_run_log(tmp_path, plan) -> None:
    """The Trainer records batches in bursts (one sync per log interval): each keeps its own end time."""
    import torch
    from loop_helpers import cpu_plan, make_trainer, tiny_mlp

    from fasttrain.train.loop.events import Collaborators
    from fasttrain.train.run.runlog import RunLog, read_metrics

    loop_plan, profile = cpu_plan(loader={"batch_size": 8, "num_workers": 0, "image_size": 4},
                                  optim={"optimizer": "sgd", "base_lr": 0.05, "base_batch": 8, "epochs": 2})
    g = torch.Generator().manual_seed(0)
    batches = [(torch.randn(8, 3, 2, 2, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(12)]
    tel = Telemetry("cpu", window=50, host_reader=dict)
    out = io.StringIO()
    log = RunLog(tmp_path, tensorboard=False)
    with Dashboard(loop_plan, total_batches=24, epochs=2, mode="plain", stream=out, telemetry=tel) as dash:
        trainer = make_trainer(loop_plan, profile.optim, tiny_mlp(), batches=12,
                          log_interval_s=1e9,  # sync only at the first and last batch: one burst of 11
                          collaborators=Collaborators(telemetry=tel, dashboard=dash, runlog=log))
        result = trainer.fit(batches, batches[:2], epochs=2)
        dash.close(RunSummary.from_json({"best_val_acc1": result.best_acc1}))
    log.close()
    snap = tel.snapshot()
    assert snap["steps_seen"] == 24 and snap["window_steps"] == 24
    stamps = [tel._t[i] for i in range(24)]
    assert all(b > a for a, b in itertools.pairwise(stamps)), "burst-recorded batches keep distinct, ordered end times"
    assert snap["data_wait_fraction"] + snap["h2d_fraction"] + snap["compute_fraction"] == pytest.approx(1.0)
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["kind"] for r in records].count("epoch") == 2
    assert all("end_time" not in r for r in records)
    text = out.getvalue()
    assert not ESC.search(text) and text.count("epoch done: epoch ") == 2 and "summary (all of it" in text


def test_dashboard_is_a_train_listener(plan) -> None:
    """The run hands its display the TrainListener calls; the dashboard answers them as its own methods do."""
    from fasttrain.train.loop.events import RunEnd, StepEvent, TrainListener

    out = io.StringIO()
    with Dashboard(plan, total_batches=4, epochs=1, mode="plain", stream=out) as dash:
        assert isinstance(dash, TrainListener)
        dash.on_run_start(plan, ["a note"])
        dash.on_step(StepEvent(StepRecord(0, 0, 0, 4, 8, 0.0, 0.0, 0.01), None))  # no telemetry: nothing to draw
        dash.on_epoch_end(EpochRow(epoch=1, train_loss=0.5))
        dash.on_message("careful", level="warning")
        dash.on_run_end(RunEnd(RunSummary.from_json({"run_dir": "runs/x", "history": []})))
    text = out.getvalue()
    assert "note: a note" in text and "epoch done: epoch 1" in text and "warning: careful" in text
    assert "run folder       runs/x" in text and "history" not in text


ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
FULL_ROW = {"epoch": 1, "train_loss": 0.42, "val_loss": 0.5, "val_acc1": 0.91, "val_acc5": 0.99, "lr": 0.003,
            "telemetry_images_per_s": 18070.4, "telemetry_data_wait_fraction": 0.7, "time_s": 30.0}


def _busy_snapshot(clock: Clock) -> dict:
    tel = telemetry_after(250, clock, wait=0.07, compute=0.03)
    return tel.snapshot() | {
        "gpu_mem_allocated_bytes": 75 * 2**30, "gpu_mem_reserved_bytes": 78 * 2**30, "gpu_mem_peak_bytes": 77 * 2**30,
        "gpu_mem_total_bytes": 80 * 2**30, "gpu_util_pct": 12.0, "gpu_power_w": 71.0, "gpu_power_limit_w": 300.0,
        "images_per_s": 18070.4, "it_per_s": 282.3, "process_rss_bytes": 2 * 2**30, "skipped_steps": 3,
        "grad_norm": 1.234, "amp_scale": 65536.0}


def _live_text(plan, report, snap: dict, *, width: int, no_color: bool = False, rows=(FULL_ROW,),
               data_kind: str = "images", total_batches: int = 300, epochs: int = 3) -> str:
    """One frame of the live screen, as a terminal of `width` columns shows it (escape codes removed)."""
    def console(buf: io.StringIO) -> Console:
        return Console(file=buf, force_terminal=True, width=width, no_color=no_color)
    buf, above = io.StringIO(), io.StringIO()
    with Dashboard(plan, total_batches=total_batches, epochs=epochs, mode="live", console=console(above),
                   report=report, forecast=FORECAST, data_kind=data_kind) as dash:
        dash.update(snap, None)
        for row in rows:
            dash.epoch_end(row)
        console(buf).print(dash.render())
    epoch_lines = [ln for ln in ANSI.sub("", above.getvalue()).splitlines() if ln.startswith("epoch ") and " | " in ln]
    return "\n".join([*epoch_lines, ""]) + ANSI.sub("", buf.getvalue())


def test_live_screen_fits_80_columns_without_cutting_a_field(plan, report) -> None:
    """At 80 columns the header and the ETA were cut and the epoch table showed `0:00:…`."""
    text = _live_text(plan, report, _busy_snapshot(Clock()), width=80)
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "…" not in text
    epoch, header, progress = lines[0], lines[1], lines[2]
    assert header.startswith("fasttrain  profile cpu") and "bf16-mixed" in header and "1 worker" in header
    assert "ETA 0:00:25" in progress and "18,070 img/s" in progress
    assert "75.0 alloc / 78.0 rsvd / 77.0 peak of 80.0 GiB" in text
    assert epoch.startswith("epoch 1/3 | train loss 0.42") and "0:00:30" in epoch and "91.0%" in epoch


def test_live_progress_is_the_epochs_own_with_the_run_beside_it(plan, report) -> None:
    """The bar counted the whole run's batches under an `epoch 1/3` label."""
    snap = {"epoch": 1, "batch_index": 39, "batches_in_epoch": 100, "step_time_s": 0.1, "it_per_s": 10.0,
            "images_per_s": 640.0}
    progress = _live_text(plan, report, snap, width=120, rows=()).splitlines()[1]
    assert progress.startswith("epoch 2/3 ")
    assert "40/100 40%" in progress and "run 47%" in progress  # 140 of 300 batches
    assert progress.count("━") == 12  # 40% of a 30-cell bar


@pytest.mark.parametrize("width", [60, 80, 100])
def test_step_split_bars_show_their_fraction_without_colour(plan, report, width: int) -> None:
    """Without colour the three bars looked equally full: each now fills round(f * W) of its W cells."""
    clock = Clock()
    snap = telemetry_after(50, clock, wait=0.02, compute=0.06).snapshot() | {"h2d_fraction": 0.05}
    text = _live_text(plan, report, snap, width=width, no_color=True, rows=())
    assert "\x1b[3" not in text
    for label, key in (("data wait", "data_wait_fraction"), ("host->dev", "h2d_fraction"),
                       ("compute", "compute_fraction")):
        line = next(ln for ln in text.splitlines() if ln.strip().startswith(label))
        cells = line.count("━") + line.count("─")
        assert cells >= 8 and len(line) <= width
        assert line.count("━") == round(snap[key] * cells), (label, line)


def test_non_image_data_say_samples_per_second(plan, report) -> None:
    snap = _busy_snapshot(Clock())
    text = _live_text(plan, report, snap, width=100, data_kind="custom")
    assert "samples/s" in text and "img/s" not in text
    out, clock = io.StringIO(), Clock()
    with Dashboard(plan, total_batches=300, epochs=3, mode="plain", stream=out, clock=clock,
                   data_kind="custom") as dash:
        dash.update(snap, None)
        clock.now = 11.0
        dash.update(snap, None)
        dash.epoch_end(FULL_ROW)
    assert "18,070 samples/s" in out.getvalue() and "img/s" not in out.getvalue()


def test_large_rates_read_with_separators() -> None:
    """`img/s 1.807e+04` in the epoch table: from 1,000 up a float reads as a whole number with separators."""
    from fasttrain.core.format import fmt_number, plural

    assert dbf.fmt_value("telemetry_images_per_s", 18070.4) == "18,070"
    assert (fmt_number(1234.5), fmt_number(999.94), fmt_number(0.003), fmt_number(-25000.0)) == \
        ("1,234", "999.9", "0.003", "-25,000")
    assert (plural(1, "worker"), plural(2, "worker"), plural(0, "warning"), plural(1, "class", "classes"),
            plural(3, "class", "classes")) == ("1 worker", "2 workers", "0 warnings", "1 class", "3 classes")


def test_live_progress_says_validating_between_the_last_batch_and_the_epoch_line(plan, report) -> None:
    """Validation showed the finished epoch's bar with `ETA 0:00:00` and nothing moving."""
    snap = {"epoch": 0, "batch_index": 99, "batches_in_epoch": 100, "step_time_s": 0.1, "it_per_s": 10.0,
            "images_per_s": 640.0}
    progress = _live_text(plan, report, snap, width=80, rows=()).splitlines()[1]
    assert progress.startswith("epoch 1/3 ") and "100/100 100%" in progress and progress.endswith("validating")
    after = _live_text(plan, report, snap, width=80, rows=(FULL_ROW,)).splitlines()
    assert "validating" not in after[2] and "ETA" in after[2]
