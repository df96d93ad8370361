"""bf16 autocast against fp32 over a run's first real steps (train/trial/precision_ab.py), where a CPU run is too
short for the tuning trial: the A/B's decisions on recorded step times (pure), the switch in a real step engine,
and real runs through the CLI (the line, the summary, the measurement cache, and where it does not run)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from loop_helpers import write_image_folder

from fasttrain.tuning import decide

ARMS = ["bf16-mixed", "fp32"]


def _ab_on(per_step: dict[str, float], **kwargs: float) -> tuple[str, list[str], dict[str, list[float]]]:
    """Drive a StepAB on a fake clock where each arm's step takes `per_step[arm]` s -> (winner, arm of each step
    taken, samples)."""
    from fasttrain.train.trial.step_ab import StepAB
    now, current, taken, results = [0.0], ["bf16-mixed"], [], []
    ab = StepAB(list(ARMS), use=lambda a: current.__setitem__(0, a), warm_each=1,
                on_done=lambda best, ratio, samples: results.append((best, samples)), clock=lambda: now[0], **kwargs)
    for i in range(30):
        ab(i)
        taken.append(current[0])
        now[0] += per_step[current[0]]
    (best, samples), = results
    return best, taken, samples


def test_recorded_step_times_decide_the_precision() -> None:
    margin = decide.PRECISION_SWITCH_MARGIN
    # efficientnet_b0 at 32 px on the 2-core AVX512-BF16 machine: 0.181 s a step in bf16, 0.092 s in fp32.
    best, taken, samples = _ab_on({"bf16-mixed": 0.181, "fp32": 0.092}, margin=margin)
    assert best == "fp32" and taken[-1] == "fp32"
    # Warm-up: two bf16 steps, then fp32's first (its kernels are built there), none of them timed; settled
    # after two timed steps each, then fp32 for the rest of the run.
    assert taken[:3] == ["bf16-mixed", "bf16-mixed", "fp32"]
    assert samples == {"bf16-mixed": pytest.approx([0.181] * 2), "fp32": pytest.approx([0.092] * 2)}
    assert set(taken[8:]) == {"fp32"}
    # resnet18: a busy machine once read fp32 1.07x faster over four steps each, where bf16 is 1.16-1.21x faster
    # in whole epochs. 7% is noise to this A/B: bf16 stays.
    assert _ab_on({"bf16-mixed": 0.0856, "fp32": 0.080}, margin=margin)[0] == "bf16-mixed"
    assert _ab_on({"bf16-mixed": 0.063, "fp32": 0.076}, margin=margin)[0] == "bf16-mixed"


def test_ab_s_in_turn_start_one_after_the_other() -> None:
    from fasttrain.train.trial.step_ab import StepAB, in_turn
    seen: list[tuple[str, int]] = []
    ticks = iter(range(1000))   # every step takes the same time: neither A/B settles early

    def clock() -> float:
        return 0.1 * next(ticks)

    first = StepAB([2, 1], use=lambda a: seen.append(("threads", a)), on_done=lambda *a: None, clock=clock)
    second = StepAB(list(ARMS), use=lambda a: seen.append(("precision", a)), on_done=lambda *a: None, clock=clock)
    hook = in_turn(None, first, second)
    assert in_turn(None, None) is None and in_turn(first) is first
    for i in range(40):
        hook(i)
    threads_done = max(i for i, (what, _) in enumerate(seen) if what == "threads")
    assert all(what == "precision" for what, _ in seen[threads_done + 1:]) and first.done and second.done
    assert [what for what, _ in seen].count("threads") == len(first.schedule) + 1  # its steps, then the winner


def test_the_switch_changes_the_autocast_of_a_real_step() -> None:
    import torch
    from torch import nn

    from fasttrain.train.loop.precision import make_precision
    model, x = nn.Linear(8, 4), torch.randn(2, 8)
    precision = make_precision("bf16-mixed", "cpu")
    with precision.autocast():
        assert model(x).dtype == torch.bfloat16
    precision.use("fp32")
    with precision.autocast():
        assert model(x).dtype == torch.float32
    assert precision.name == "fp32"
    with pytest.raises(ValueError):
        make_precision("fp16-mixed", "cpu").use("fp32")   # a GradScaler's state cannot be switched off mid-run


def _folder(tmp_path: Path) -> Path:
    # 3 classes x 40 images at batch 4: 30 steps an epoch, so 4 epochs plan 120 steps (the A/B needs 100)
    return write_image_folder(tmp_path / "data", classes=3, train_per_class=40, val_per_class=4, size=16)


def test_a_short_cpu_run_measures_its_precision_and_the_next_run_keeps_it(cli, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    data = _folder(tmp_path)
    args = ("train", "--data", str(data), "--model", "tiny_cnn", "--image-size", "16", "--epochs", "4", "--set",
            "loader.batch_size=4")
    planned = json.loads(cli(*args, "--dry-run", "--json").out)
    first = cli(*args, "--run-name", "first")
    assert first.code == 0, first.err
    lines = [line for line in first.out.splitlines() if line.startswith("tuning: ") and "ms a step in" in line]
    if planned["plan"]["precision"] != "bf16-mixed":   # a CPU without fast bf16: fp32 from the start, no A/B
        assert not lines
        return
    assert len(lines) == 1 and "fp32 must be 15% faster to replace bf16" in lines[0]
    summary = json.loads((tmp_path / "runs" / "first" / "summary.json").read_text())
    chose = summary["precision"]
    assert chose in ARMS and lines[0].startswith(f"tuning: {chose} ")
    assert summary["epochs_run"] == 4 and summary["final_val_acc1"] is not None
    from fasttrain.tuning.store import load_cache
    measured = [m for entry in load_cache().values() for m in entry.get("measurements", [])
                if m.get("setting") == "precision" and m.get("source") == "train (first steps)"]
    assert len(measured) == 1 and measured[0]["value"] == chose
    # The next run with this machine, model and data starts at the measured precision, without an A/B.
    again = cli(*args, "--run-name", "again")
    assert again.code == 0 and not any("ms a step in" in line for line in again.out.splitlines())
    assert f"in an earlier run's first steps (cached: no trial this run): precision={chose}" in again.out
    assert "None" not in again.out and "measured ?" not in again.out
    assert json.loads((tmp_path / "runs" / "again" / "summary.json").read_text())["precision"] == chose


@pytest.mark.parametrize("extra", [("--no-tune",), ("--set", "speed.precision=bf16-mixed"), ("--epochs", "2")],
                         ids=["no-tune", "users-precision", "too-short"])
def test_no_ab_where_the_user_decided_or_the_run_is_too_short(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               extra: tuple[str, ...]) -> None:
    monkeypatch.chdir(tmp_path)
    res = cli("train", "--data", str(_folder(tmp_path)), "--model", "tiny_cnn", "--image-size", "16", "--epochs", "4",
              "--set", "loader.batch_size=4", *extra)
    assert res.code == 0, res.err
    assert "ms a step in" not in res.out
