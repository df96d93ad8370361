"""`fasttrain train` end to end on tiny real image folders: plan, bad inputs, a real run and its files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_subprocess
from loop_helpers import TINY_PROFILE, write_image_folder

PROFILE = TINY_PROFILE


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    profile = tmp_path / "tiny.yaml"
    profile.write_text(PROFILE)
    return write_image_folder(tmp_path / "data"), profile


def test_dry_run_prints_the_plan(cli, setup) -> None:
    data, profile = setup
    res = cli("train", "--profile", str(profile), "--data", str(data), "--model", "tiny_cnn", "--dry-run",
              "--set", "optim.accumulation_steps=2", "--epochs", "3")
    assert res.code == 0, res.err
    out = res.out
    assert "device       cpu: no CUDA GPU" in out
    assert "precision    bf16-mixed" in out and "no CUDA GPU" in out
    assert "effective batch 8" in out and "@ base batch 64 -> 0.000375 at batch 8" in out  # 0.003 x 8 / 64
    assert "6 per epoch x 3 epochs" in out  # floor(24 train images / 4)
    assert "workers      0" in out and "\x1b" not in out
    assert "(asked 0: asked)" not in out and "1 devices" not in out
    assert "precision    bf16-mixed (as asked; " in out, "kept as asked: it must not read as if it was changed"


def test_dry_run_json(cli, setup) -> None:
    data, profile = setup
    res = cli("train", "--profile", str(profile), "--data", str(data), "--dry-run", "--json",
              "--set", "loader.batch_size=8")
    assert res.code == 0, res.err
    view = json.loads(res.out)
    assert view["plan"]["batch_size"] == 8 and view["plan"]["iterations_per_epoch"] == 3
    assert view["model"] == "resnet18" and view["data"]["num_classes"] == 3 and view["data"]["kind"] == "images"
    # the user's --set is the last layer the user gave; the data checks' decisions (small images validated whole)
    # come after it, on keys it did not set
    assert [s for s in view["sources"] if not s.startswith("flag ")][-1] == "--set"


@pytest.mark.parametrize("args,expected", [
    (["--data", "{tmp}/no-such-dir"], "no-such-dir"),
    (["--data", "{tmp}/empty"], "empty"),
    (["--model", "resnet_18"], "unknown model 'resnet_18'"),
    (["--set", "loader.batchsize=8"], "did you mean 'loader.batch_size'"),
    (["--set", "loader.batch_size=-1"], "loader.batch_size"),
    (["--set", "nonsense"], "expected KEY=VALUE"),
    (["--epochs", "0"], "--epochs: must be at least 1"),
    (["--profile", "cpuu"], "cpu"),
    (["--set", "world.gpus_per_node=2"], "the profile asks for 2 processes"),
])
def test_bad_inputs_exit_2_with_a_reason(cli, setup, tmp_path: Path, args: list[str], expected: str) -> None:
    data, profile = setup
    (tmp_path / "empty" / "train" / "a").mkdir(parents=True)
    (tmp_path / "empty" / "train" / "b").mkdir(parents=True)
    base = {"--data": str(data), "--profile": str(profile), "--model": "tiny_cnn"}
    given = [a.replace("{tmp}", str(tmp_path)) for a in args]
    for flag, value in base.items():
        if flag not in given:
            given += [flag, value]
    res = cli("train", *given, "--dry-run")
    assert res.code == 2, (res.out, res.err)
    assert expected in res.err and "Traceback" not in res.err
    assert res.err.startswith("fasttrain: error:")


def test_a_real_run_writes_checkpoints_metrics_and_plain_output(setup, tmp_path: Path) -> None:
    data, profile = setup
    proc = run_subprocess("train", "--profile", str(profile), "--data", str(data), "--model", "tiny_cnn",
                          "--runs-dir", str(tmp_path / "runs"), "--run-name", "t1", "--save-every", "1",
                          cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\x1b" not in proc.stderr  # not a terminal: plain lines only
    assert "summary (all of it" in proc.stdout and "accuracy         acc@1" in proc.stdout
    run = tmp_path / "runs" / "t1"
    assert {"last.pt", "model.safetensors", "epoch_0001.pt", "epoch_0002.pt", "metrics.jsonl", "profile.yaml",
            "summary.json"} <= {p.name for p in run.iterdir()}
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    kinds = [r["kind"] for r in rows]
    assert kinds.count("epoch") == 2 and "step" in kinds
    epoch = [r for r in rows if r["kind"] == "epoch"][-1]
    assert {"train_loss", "val_loss", "val_acc1"} <= set(epoch) and epoch["val_acc5"] is None  # 3 classes
    summary = json.loads((run / "summary.json").read_text())
    assert summary["epochs_run"] == 2 and summary["precision"] == "bf16-mixed"
    import torch

    from fasttrain.train.state import checkpoint
    payload = checkpoint.load(run / "last.pt")
    assert payload["epoch"] == 2 and payload["profile"]["loader"]["batch_size"] == 4
    assert {"model", "optimizer", "schedule", "rng", "sampler", "plan", "versions"} <= set(payload)
    from fasttrain.models.tiny import tiny_cnn
    checkpoint.load_model_state(tiny_cnn(num_classes=3), payload["model"], run / "last.pt")
    with pytest.raises(Exception, match="does not fit"):
        checkpoint.load_model_state(tiny_cnn(num_classes=4), payload["model"], run / "last.pt")
    assert torch.is_tensor(payload["rng"]["torch"])


def test_json_summary_and_a_custom_model(cli, setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, profile = setup
    (tmp_path / "mynets.py").write_text(
        "import torch\n"
        "def small(num_classes):\n"
        "    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, num_classes))\n")
    monkeypatch.chdir(tmp_path)
    res = cli("train", "--profile", str(profile), "--data", str(data), "--model", "mynets:small", "--json",
              "--runs-dir", str(tmp_path / "runs"), "--epochs", "1", "--quiet")
    assert res.code == 0, res.err
    summary = json.loads(res.out)
    assert summary["model"] == "mynets:small" and summary["epochs_run"] == 1
    assert 0.0 <= summary["final_val_acc1"] <= 1.0 and Path(summary["checkpoint_last"]).is_file()


def test_batch_size_flag_wins_over_set(cli, setup) -> None:
    data, profile = setup
    res = cli("train", "--profile", str(profile), "--data", str(data), "--dry-run", "--json",
              "--set", "loader.batch_size=8", "--batch-size", "6")
    assert res.code == 0, res.err
    view = json.loads(res.out)
    assert view["plan"]["batch_size"] == 6 and view["plan"]["iterations_per_epoch"] == 4  # floor(24 / 6)


def test_batch_size_auto_keeps_the_effective_batch_through_accumulation(cli, setup, monkeypatch) -> None:
    # A real model that raises CUDA OOM above 3 samples: the search must land on a size it ran, at or under 3
    # minus the margin, and accumulation must restore the profile's 8 samples per optimizer step.
    data, profile = setup
    monkeypatch.setenv("FAULT_OOM_ABOVE", "3")
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    res = cli("train", "--profile", str(profile), "--data", str(data), "--model", "fault_models:oom_net",
              "--dry-run", "--json", "--set", "loader.batch_size=8", "--batch-size", "auto")
    assert res.code == 0, res.err
    plan = json.loads(res.out)["plan"]
    assert plan["batch_size"] <= 3
    assert plan["batch_size"] * plan["accumulation_steps"] >= 8 and plan["effective_batch"] >= 8
    assert any(note.startswith("batch auto:") for note in plan["notes"])


def test_bad_batch_size_exits_2(cli, setup) -> None:
    data, profile = setup
    res = cli("train", "--profile", str(profile), "--data", str(data), "--dry-run", "--batch-size", "-3")
    assert res.code == 2 and "--batch-size" in res.err and "Traceback" not in res.err


def test_dry_run_of_a_multi_gpu_line_plans_for_the_profiles_machine(cli, tmp_path: Path) -> None:
    """The README's `train --profile aws-a10g --nproc-per-node 4` (marked "needs 4 GPUs"): its dry run on a machine
    without a CUDA GPU plans the 4 x A10G job the profile describes and says why a real run here would stop; the real
    run here is still refused before any process starts (exit 2, one line)."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("checks the plan made on a machine without a CUDA GPU")
    data = write_image_folder(tmp_path / "data", classes=4, train_per_class=65, val_per_class=2)
    line = ["train", "--profile", "aws-a10g", "--data", str(data), "--nproc-per-node", "4", "--model", "tiny_cnn",
            "--set", "loader.batch_size=64"]  # 260 train images: 65 per process
    res = cli(*line, "--dry-run", "--json")
    assert res.code == 0, res.err
    view = json.loads(res.out)
    plan = view["plan"]
    assert (plan["device"], plan["world_size"], plan["effective_batch"]) == ("cuda", 4, 256)
    assert plan["workers"] <= 4  # 16 cores shared by 4 processes, not 12 each
    assert any("planned for the profile's machine (4 x A10G" in n and "real run here stops" in n
               for n in view["notes"]), view["notes"]
    real = cli(*line, "--epochs", "1")
    assert real.code == 2 and "Traceback" not in real.out + real.err
    assert "--nproc-per-node" in real.err and "CPU processes on" in real.err


def test_a_too_small_share_names_the_processes(cli, tmp_path: Path) -> None:
    """With 4 processes, each gets a quarter of the data: the refusal says so instead of 'larger than N samples'."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("checks the plan made on a machine without a CUDA GPU")
    data = write_image_folder(tmp_path / "data", classes=2, train_per_class=20, val_per_class=2)
    res = cli("train", "--profile", "aws-a10g", "--data", str(data), "--nproc-per-node", "4", "--dry-run",
              "--set", "loader.batch_size=16")
    assert res.code == 2, res.out
    assert "each process's share" in res.err and "for each of 4 processes" in res.err


def test_a_runs_own_forecast_times_the_cpu_quickly_and_estimate_does_not(cli, setup, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Every second before the first step counts against time to accuracy: the run's forecast (dashboard, trial
    go/no-go) takes cpu_ceiling's short windows; `estimate`, whose accuracy is benchmarked, the long ones."""
    from fasttrain.estimate import cpu_ceiling
    windows: list[float] = []
    real = cpu_ceiling.measure

    def spy(*args: object, **kwargs: object) -> object:
        windows.append(kwargs.get("window_s", args[3] if len(args) > 3 else cpu_ceiling.WINDOW_S))
        return real(*args, **kwargs)
    monkeypatch.setattr(cpu_ceiling, "measure", spy)
    data, profile = setup
    res = cli("train", "--profile", str(profile), "--data", str(data), "--model", "tiny_cnn", "--epochs", "1",
              "--runs-dir", str(tmp_path / "runs"))
    assert res.code == 0, res.err
    assert windows == [cpu_ceiling.QUICK_WINDOW_S]
    res = cli("estimate", "--profile", str(profile), "--model", "tiny_cnn", "--dataset-size", "100")
    assert res.code == 0, res.err
    assert windows[1:] == [cpu_ceiling.WINDOW_S]
