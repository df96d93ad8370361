"""Issue 43 item 8 (a): the plan says what the run's checkpoints will weigh, and the end says what was written.

The forecast is a pure function of the model's tensors (their bytes, the trainable ones' bytes) and the settings
that add copies (the optimizer's state: 1x the trainable weights for SGD with momentum, 2x for Adam(W); the moving
average; last.pt on or off; --save-every). It is checked here on fixed figures, and against the bytes real tiny runs
leave on disk (tiny_cnn on real PNG files, through the CLI's entry point): within 10%."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from loop_helpers import DETERMINISTIC_PROFILE, write_image_folder

from fasttrain.train.state.checkpoint_size import ModelBytes, forecast, run_files

W, T = 40_000_000, 39_000_000  # a model's state (weights and buffers) and its trainable weights, bytes
MODEL = ModelBytes(weights=W, trainable=T, tensors=100, trainable_tensors=60)


def _near(value: int, expected: float, share: float = 0.01) -> bool:
    return abs(value - expected) <= share * expected


def test_the_optimizer_and_the_moving_average_add_their_copies_to_last_pt() -> None:
    adamw = forecast(MODEL, optimizer="adamw", momentum=0.9, ema=True, keep_last=True)
    assert _near(adamw.files["last.pt"], W + 2 * T + W)                # weights, exp_avg + exp_avg_sq, the average
    assert _near(adamw.files["model.safetensors"], W)
    # when the last epoch is the best, last.pt holds no second copy of the weights model.safetensors keeps
    assert _near(adamw.total_when_last_is_best, adamw.total - W, 0.001)
    sgd = forecast(MODEL, optimizer="sgd", momentum=0.9, ema=False, keep_last=True)
    assert _near(sgd.files["last.pt"], W + T)                          # weights, momentum buffers
    plain = forecast(MODEL, optimizer="sgd", momentum=0.0, ema=False, keep_last=True)
    assert _near(plain.files["last.pt"], W)
    assert _near(forecast(MODEL, optimizer="adam", momentum=0.0, ema=False, keep_last=True).files["last.pt"], W + 2 * T)


def test_no_last_pt_leaves_the_model_files_and_save_every_adds_whole_checkpoints() -> None:
    short = forecast(MODEL, optimizer="adamw", momentum=0.9, ema=True, keep_last=False)
    assert "last.pt" not in short.files and _near(short.total, W) and short.total_when_last_is_best == short.total
    kept = forecast(MODEL, optimizer="adamw", momentum=0.9, ema=False, keep_last=True, numbered=3)
    assert kept.files["epoch_NNNN.pt"] == 3 * kept.files["last.pt"]
    assert kept.total == sum(kept.files.values())


@pytest.mark.parametrize("sets", [(), ("--set", "optim.optimizer=sgd", "--set", "optim.ema_decay=null")],
                         ids=["adamw-ema", "sgd-momentum"])
def test_the_plan_forecasts_the_bytes_a_real_run_leaves_within_ten_percent(cli, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                            sets: tuple[str, ...]) -> None:
    monkeypatch.chdir(tmp_path)
    write_image_folder(tmp_path / "data")
    (tmp_path / "tiny.yaml").write_text(DETERMINISTIC_PROFILE)
    base = ("train", "--profile", "tiny.yaml", "--data", "data", "--model", "tiny_cnn", "--run-name", "r", "--no-tune",
            "--epochs", "2", *sets)
    plan = cli(*base, "--dry-run")
    assert plan.code == 0, plan.err
    line = next((ln for ln in plan.out.splitlines() if ln.startswith("checkpoints ")), None)
    assert line is not None and "last.pt" in line and "model.safetensors" in line, plan.out
    view = json.loads(cli(*base, "--dry-run", "--json").out)
    told = view["checkpoints"]
    assert set(told["files"]) == {"last.pt", "model.safetensors", "model.json"}

    done = cli(*base)
    assert done.code == 0, done.err[-2000:]
    run = tmp_path / "runs" / "r"
    summary = json.loads((run / "summary.json").read_text())
    on_disk = sum(run_files(run).values())
    expected = told["total_when_last_is_best"] if summary["best_epoch"] == summary["epochs_run"] else told["total"]
    assert abs(on_disk - expected) <= 0.1 * expected, (on_disk, told)
    # the summary and the ending say what was written
    assert summary["checkpoint_bytes"] == run_files(run)
    row = next((ln.strip() for ln in done.out.splitlines() if ln.strip().startswith("checkpoints")), "")
    assert "MiB" in row and "last.pt" in row and "model.safetensors" in row, done.out
