"""The forecast beside a run is for the device that runs it (issue 25, point 2): a kaggle-t4 run on a CPU is
forecast for this CPU, not the T4, in the dashboard and in summary.json."""
from __future__ import annotations

import json
from pathlib import Path

from loop_helpers import write_image_folder


def test_a_gpu_profile_run_on_the_cpu_is_forecast_for_the_cpu(cli, tmp_path: Path) -> None:
    data = write_image_folder(tmp_path / "data", classes=3, train_per_class=8, val_per_class=4)
    result = cli("train", "--profile", "kaggle-t4", "--data", str(data), "--model", "tiny_cnn", "--epochs", "1",
                 "--set", "loader.batch_size=4", "--set", "loader.image_size=16", "--runs-dir", str(tmp_path / "runs"),
                 "--no-tune", "--json")
    assert result.code == 0, result.err
    summary = json.loads(result.out)
    assert summary["device"] == "cpu"
    forecast = summary["forecast"]
    assert forecast is not None and forecast["device"] == "cpu", forecast
