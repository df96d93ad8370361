"""CUDA: mixed precision and backend flags, as the plan says, observed on the device (marker `gpu`).

fp16: autocast casts convolutions to float16, a GradScaler scales the loss, its state moves and is saved in the
checkpoint. bf16 (Ampere+): autocast to bfloat16 and no scaler. cudnn.benchmark and TF32 follow the plan both
ways (on for the fp16 run, off for the bf16 one: a flag left over from an earlier run in the same process would
show). The model (tests/gpu_models.py:probe_cnn) notes what it saw on its first forward in each mode.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpu_helpers import all_finite, checkpoint, finite, release_cuda, step_rows, summary, tf32_expected, write_profile
from loop_helpers import write_image_folder

pytestmark = pytest.mark.gpu
TESTS = Path(__file__).resolve().parent


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(TESTS))
    import gpu_models
    gpu_models.SEEN.clear()
    yield gpu_models.SEEN
    gpu_models.SEEN.clear()
    release_cuda()


def _train(cli, tmp_path: Path, name: str, **sections: dict) -> tuple[dict, dict, Path]:
    """(dry-run plan, summary, run folder) of an in-process run of probe_cnn on a small image folder."""
    data = tmp_path / "data"
    if not data.exists():
        write_image_folder(data, classes=3, train_per_class=32, val_per_class=8, size=32)
    profile = write_profile(tmp_path / f"{name}.yaml", **sections)
    args = ("train", "--profile", str(profile), "--data", str(data), "--model", "gpu_models:probe_cnn")
    dry = cli(*args, "--dry-run", "--json")
    assert dry.code == 0, dry.err
    plan = json.loads(dry.out)["plan"]
    res = cli(*args, "--runs-dir", str(tmp_path / "runs"), "--run-name", name, "--json", "--quiet")
    assert res.code == 0, res.err[-3000:]
    run = tmp_path / "runs" / name
    return plan, summary(run), run


def _seen(probe: list[dict], training: bool) -> dict:
    hits = [s for s in probe if s["training"] is training]
    assert hits, f"probe_cnn never ran in {'train' if training else 'eval'} mode: {probe}"
    return hits[0]


def test_fp16_autocast_gradscaler_and_speed_flags_on(cli, tmp_path: Path, probe: list[dict]) -> None:
    import torch
    tf32 = tf32_expected(torch.cuda.get_device_capability(0)[0])  # asked for; off on a T4 or V100 (issue 24, #17)
    plan, result, run = _train(cli, tmp_path, "fp16")
    assert plan["device"] == "cuda" and plan["precision"] == "fp16-mixed"
    assert plan["tf32"] is tf32 and plan["cudnn_benchmark"] is True and plan["channels_last"] is True
    assert plan["pin_memory"] is True and plan["fused_optimizer"] is True
    assert result["device"] == "cuda" and result["precision"] == "fp16-mixed" and result["epochs_run"] == 2
    assert finite(result["final_train_loss"]) and finite(result["final_val_loss"])

    for training in (True, False):  # the sanity validation runs eval first; both modes under autocast fp16
        seen = _seen(probe, training)
        assert seen["input_device"] == "cuda" and seen["weight_device"] == "cuda", seen
        assert seen["autocast_dtype"] == "torch.float16" and seen["conv_dtype"] == "torch.float16", seen
        assert seen["weight_dtype"] == "torch.float32", seen  # master weights stay fp32 under autocast
        assert seen["input_channels_last"] is True, seen
        assert seen["cudnn_benchmark"] is True and seen["cudnn_allow_tf32"] is tf32, seen
        assert seen["float32_matmul_precision"] == ("high" if tf32 else "highest"), seen
        assert seen["matmul_allow_tf32"] is tf32, seen

    scales = [r["amp_scale"] for r in step_rows(run) if r.get("amp_scale") is not None]
    assert scales and all(finite(s) and s > 0 for s in scales), scales  # read back on logged steps

    payload = checkpoint(run / "last.pt")
    assert payload["plan"]["device"] == "cuda" and payload["plan"]["precision"] == "fp16-mixed"
    scaler = payload["scaler"]
    assert scaler is not None and {"scale", "_growth_tracker"} <= set(scaler), scaler
    assert finite(float(scaler["scale"])) and float(scaler["scale"]) > 0
    # The scaler really ran: it either backed off from its initial 2**16 (an overflow) or counted clean steps.
    assert float(scaler["scale"]) != 2.0 ** 16 or int(scaler["_growth_tracker"]) > 0, scaler
    assert all_finite(payload["model"])
    assert all(str(t.dtype) == "torch.float32" for t in payload["model"].values() if t.is_floating_point()), \
        "saved weights are the fp32 master copy"


def test_bf16_on_ampere_or_newer_has_no_scaler_and_speed_flags_off(cli, tmp_path: Path,
                                                                     probe: list[dict]) -> None:
    import torch
    major, minor = torch.cuda.get_device_capability(0)
    if major < 8:
        pytest.skip(f"bf16 needs compute capability 8.0 or newer; this GPU is {major}.{minor}")
    plan, result, run = _train(cli, tmp_path, "bf16",
                               speed={"precision": "bf16-mixed", "tf32": False, "cudnn_benchmark": False})
    assert plan["device"] == "cuda" and plan["precision"] == "bf16-mixed"
    assert plan["tf32"] is False and plan["cudnn_benchmark"] is False
    assert result["precision"] == "bf16-mixed" and result["epochs_run"] == 2 and finite(result["final_train_loss"])

    seen = _seen(probe, True)
    assert seen["autocast_dtype"] == "torch.bfloat16" and seen["conv_dtype"] == "torch.bfloat16", seen
    assert seen["cudnn_benchmark"] is False and seen["cudnn_allow_tf32"] is False, seen
    assert seen["float32_matmul_precision"] == "highest" and seen["matmul_allow_tf32"] is False, seen

    assert all(r.get("amp_scale") is None for r in step_rows(run)), "bf16 needs no loss scaling"
    payload = checkpoint(run / "last.pt")
    assert payload["scaler"] is None and payload["plan"]["precision"] == "bf16-mixed"
    assert all_finite(payload["model"])
