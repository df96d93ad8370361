"""`fasttrain estimate` through the real entry point: --json keys, exit-2 cases, --compare rows, --data, --measure."""
from __future__ import annotations

import json
import textwrap

import pytest

TINY = ["--model", "tiny_cnn", "--image-size", "16", "--num-classes", "10"]
TOP_KEYS = {"profile", "target", "dataset_size_source", "forecast", "plan_notes"}
FORECAST_KEYS = {"model", "device", "schedule", "speed", "time", "memory", "host_ram", "loader", "bottleneck",
                 "cost", "unknown"}


def _json(result) -> dict:
    assert result.code == 0, result.err
    return json.loads(result.out)


def test_json_has_stable_keys_and_a_full_forecast_for_a_known_gpu(cli) -> None:
    d = _json(cli("estimate", "--profile", "kaggle-t4", *TINY, "--dataset-size", "10000", "--epochs", "3", "--json"))
    assert set(d) >= TOP_KEYS and set(d["forecast"]) == FORECAST_KEYS
    f = d["forecast"]
    assert f["device"]["name"] == "T4" and d["target"] == "profile"
    assert f["schedule"]["iterations_per_epoch"] == 10000 // f["schedule"]["batch_size"]
    assert f["speed"]["images_per_s"] > 0 and 0 < f["speed"]["mfu"] < 1
    assert f["time"]["val_images"] == 10000 // 9 and f["time"]["val_s"] > 0   # the 10% a folder would split off
    assert f["time"]["total_s"] == pytest.approx(3 * (f["time"]["epoch_s"] + f["time"]["val_s"]))
    assert f["memory"]["fits"] is True and f["memory"]["largest_batch"] > f["schedule"]["batch_size"]
    # no --data: the input pipeline is estimated from this CPU's decode rate; 2 workers cannot feed a T4 running a
    # tiny CNN at 16 px, and the estimate names it without lowering the GPU's forecast
    assert (
        f["bottleneck"]["name"] == "input pipeline (estimate)" and "2 workers feed about" in f["bottleneck"]["evidence"]
    )
    assert f["loader"]["estimated"] and not f["loader"]["measured"] and f["loader"]["cores"] == 4
    assert f["speed"]["images_per_s"] == f["speed"]["compute_only_images_per_s"]
    assert f["schedule"]["precision"] == "fp16-mixed"  # bf16 asked or not, a T4 runs fp16


def test_gpu_flag_moves_the_plan_to_another_gpu(cli) -> None:
    t4 = _json(cli("estimate", "--profile", "kaggle-t4", *TINY, "--json"))["forecast"]
    a100 = _json(cli("estimate", "--profile", "kaggle-t4", *TINY, "--gpu", "A100 80GB", "--json"))["forecast"]
    assert a100["device"]["name"] == "A100 80GB SXM4"
    assert a100["speed"]["images_per_s"] > t4["speed"]["images_per_s"]
    assert a100["memory"]["capacity"] == 80 * 10**9


def test_unknown_peaks_say_what_is_unknown_instead_of_a_number(cli, monkeypatch) -> None:
    monkeypatch.setattr("fasttrain.hardware.gpus._standins", dict)  # the A10G without its stand-in's peaks
    r = cli("estimate", "--profile", "aws-a10g", *TINY)
    assert r.code == 0
    assert "unknown: fp16_tensor_tflops_dense of A10G (AWS g5)" in r.out
    f = _json(cli("estimate", "--profile", "aws-a10g", *TINY, "--json"))["forecast"]
    assert f["speed"]["images_per_s"] is None and f["time"]["epoch_s"] is None
    assert f["memory"]["fits"] is True


def test_multi_gpu_plan_in_the_forecast(cli) -> None:
    f = _json(
        cli(
            "estimate",
            "--profile",
            "kaggle-t4",
            *TINY,
            "--set",
            "world.gpus_per_node=4",
            "--dataset-size",
            "100000",
            "--json",
        )
    )["forecast"]
    s = f["schedule"]
    assert s["world_size"] == 4 and s["effective_batch"] == 4 * s["batch_size"]
    assert (
        s["scaled_lr"] == pytest.approx(4 * s["base_lr"] * s["batch_size"] / 256, rel=0.01)
        or s["scaled_lr"] > s["base_lr"]
    )
    assert s["iterations_per_epoch"] == 100000 // (4 * s["batch_size"])
    assert f["loader"]["total_workers"] == 4 * f["loader"]["workers"]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--model", "tiny_cnnn"], "--model: unknown model 'tiny_cnnn'"),
        (["--model", "tiny_cnn", "--dataset-size", "0"], "--dataset-size: must be a positive"),
        (["--model", "tiny_cnn", "--gpu", "A100 90GB"], "--gpu: unknown GPU 'A100 90GB'"),
        (["--model", "tiny_cnn", "--image-size", "-3"], "--image-size: must be a positive"),
        (["--model", "tiny_cnn", "--profile", "kagle-t4"], "kagle-t4"),
    ],
)
def test_bad_input_exits_2_with_a_reason(cli, args, expected) -> None:
    r = cli("estimate", *args, "--profile", "kaggle-t4", *[]) if "--profile" not in args else cli("estimate", *args)
    assert r.code == 2
    assert expected in r.err and "Traceback" not in r.err


def test_unknown_model_suggests_close_matches(cli) -> None:
    r = cli("estimate", "--profile", "kaggle-t4", "--model", "tiny_cnnn")
    assert "did you mean 'tiny_cnn'" in r.err


def test_an_image_size_the_model_cannot_take_exits_2(cli, tmp_path, monkeypatch) -> None:
    (tmp_path / "fixednet.py").write_text(
        textwrap.dedent("""
        import torch.nn as nn
        def build(num_classes=10):
            return nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, num_classes))
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    r = cli("estimate", "--profile", "kaggle-t4", "--model", "fixednet:build", "--image-size", "20")
    assert r.code == 2 and "--image-size: model 'fixednet:build' cannot take 20 px images" in r.err


def test_compare_presets_one_sorted_row_each(cli) -> None:
    from fasttrain.profiles.files import preset_names

    d = _json(cli("estimate", "--profile", "kaggle-t4", *TINY, "--compare", "--json"))
    rows = d["compare"]["rows"]
    assert d["compare"]["kind"] == "presets"
    assert sorted(r["name"] for r in rows) == preset_names()
    known = [r["total_s"] for r in rows if r["total_s"] is not None]
    assert known == sorted(known) and len(known) >= 2
    assert all(r["total_s"] is None for r in rows[len(known) :])  # unknown peaks sort last, not guessed
    assert {"memory_verdict", "on_demand_per_run", "spot_per_run", "epoch_s"} <= set(rows[0])


def test_compare_gpus_covers_the_spec_file(cli) -> None:
    from fasttrain.hardware import gpus

    d = _json(cli("estimate", "--profile", "kaggle-t4", *TINY, "--compare", "gpus", "--json"))
    assert d["compare"]["kind"] == "gpus"
    assert sorted(r["name"] for r in d["compare"]["rows"]) == sorted(gpus.gpu_names())
    r = cli("estimate", "--profile", "kaggle-t4", *TINY, "--compare", "gpus")
    assert r.code == 0 and "every GPU in the spec file" in r.out
    assert cli("estimate", "--profile", "kaggle-t4", *TINY, "gpus").code == 2  # the kind needs --compare


def test_data_dir_counts_images_and_measures_the_loader(cli, tmp_path) -> None:
    from PIL import Image

    for cls in ("a", "b"):
        (tmp_path / cls).mkdir()
        for i in range(3):
            Image.new("RGB", (24, 20), (i * 40, 80, 120)).save(tmp_path / cls / f"{i}.png")
    f = _json(
        cli(
            "estimate",
            "--profile",
            "kaggle-t4",
            *TINY,
            "--set",
            "loader.batch_size=2",
            "--data",
            str(tmp_path),
            "--json",
        )
    )["forecast"]
    assert f["schedule"]["dataset_size"] == 4  # train's split: one image of each class goes to validation
    assert f["loader"]["measured"] and f["loader"]["images_per_s_per_worker"] > 0
    assert isinstance(f["loader"]["keeps_up"], bool)
    assert cli("estimate", "--profile", "kaggle-t4", *TINY, "--data", str(tmp_path / "nope")).code == 2


def test_default_profile_is_the_one_that_fits_this_machine(cli) -> None:
    from fasttrain.hardware import machine as hardware
    from fasttrain.profiles import preset_match

    d = _json(cli("estimate", *TINY, "--json"))
    assert d["profile"] == preset_match.best_preset(hardware.probe())


def test_measure_runs_real_steps_beside_the_forecast(cli) -> None:
    d = _json(
        cli(
            "estimate",
            "--profile",
            "cpu",
            *TINY,
            "--set",
            "loader.batch_size=8",
            "--measure",
            "--measure-steps",
            "2",
            "--json",
        )
    )
    m = d["measure"]
    assert m["measured"]["images_per_s"] > 0 and m["forecast"]["images_per_s"] > 0
    assert m["measured"]["peak_memory_bytes"] > 0


def test_human_output_has_every_section(cli) -> None:
    r = cli("estimate", "--profile", "gcp-v100", *TINY)
    assert r.code == 0
    for heading in (
        "model cost",
        "schedule and speed",
        "GPU memory",
        "host RAM",
        "data loading",
        "cost",
        "bottleneck:",
        "iterations per epoch",
        "largest batch that fits",
        "MFU",
    ):
        assert heading in r.out, heading


def test_batch_size_number_moves_batch_and_scaled_lr(cli) -> None:
    s = _json(cli("estimate", "--profile", "kaggle-t4", *TINY, "--batch-size", "384", "--json"))["forecast"]["schedule"]
    assert s["batch_size"] == 384 and s["scaled_lr"] == pytest.approx(0.75)  # 0.5 @ 256 -> 0.75 @ 384


@pytest.mark.parametrize(
    "value, reason", [("0", "positive integer or auto"), ("big", "positive integer or auto"), ("auto", "add --measure")]
)
def test_bad_batch_size_exits_2(cli, value: str, reason: str) -> None:
    r = cli("estimate", "--profile", "cpu", *TINY, "--batch-size", value)
    assert r.code == 2 and "--batch-size" in r.err and reason in r.err


def test_batch_size_auto_with_measure_searches_here_and_keeps_effective_batch(cli) -> None:
    d = _json(
        cli(
            "estimate",
            "--profile",
            "cpu",
            *TINY,
            "--batch-size",
            "auto",
            "--measure",
            "--measure-steps",
            "1",
            "--set",
            "loader.batch_size=8",
            "--json",
        )
    )
    assert any(note.startswith("batch auto:") for note in d["plan_notes"])
    s = d["forecast"]["schedule"]
    assert s["batch_size"] * s["accumulation_steps"] >= 8
    assert d["measure"]["measured"]["images_per_s"] > 0


def test_nproc_per_node_and_nnodes_shape_the_forecast(cli) -> None:
    res = cli(
        "estimate",
        "--profile",
        "aws-a10g",
        "--model",
        "resnet18",
        "--gpu",
        "A100 80GB",
        "--nproc-per-node",
        "2",
        "--nnodes",
        "2",
        "--json",
    )
    assert res.code == 0, res.err
    s = json.loads(res.out)["forecast"]["schedule"]
    assert (s["world_size"], s["nodes"], s["gpus_per_node"], s["effective_batch"]) == (4, 2, 2, 1024)
