"""`fasttrain profiles list|show|validate` through the real entry point: output, --json, exit codes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_list_table_and_json(cli) -> None:
    r = cli("profiles", "list")
    assert r.code == 0
    for name in ("aws-a10g", "cpu", "gcp-v100", "kaggle-t4", "laptop-4060"):
        assert name in r.out
    assert "\x1b[" not in r.out  # plain text when not on a terminal
    rows = {row["name"]: row for row in json.loads(cli("profiles", "list", "--json").out)["profiles"]}
    assert rows["aws-a10g"]["effective_batch"] == 256 and rows["aws-a10g"]["scaled_lr"] == 0.5
    assert rows["laptop-4060"]["effective_batch"] == 32
    assert set(rows["cpu"]) >= {"gpu", "vram_gb", "batch_size", "num_workers", "precision", "effective_batch",
                                "scaled_lr"}


def test_show_gives_values_sources_and_arithmetic(cli) -> None:
    r = cli("profiles", "show", "aws-a10g", "--set", "loader.batch_size=384", "--dataset-size", "1281167")
    assert r.code == 0, r.err
    assert "0.5 x 384 / 256" in r.out and "0.75" in r.out
    assert "3,336" in r.out  # iterations per epoch, aggressive note
    assert "--set" in r.out and "preset aws-a10g" in r.out


def test_show_json_has_stable_keys(cli) -> None:
    data = json.loads(cli("profiles", "show", "laptop-4060", "--json", "--dataset-size", "1000").out)
    assert set(data) == {"name", "sources", "profile", "provenance", "derived", "notes"}
    assert data["derived"]["effective_batch"] == 32 and data["derived"]["iterations_per_epoch"] == 62
    assert data["provenance"]["optim.accumulation_steps"] == "preset laptop-4060"


def test_validate_ok_files(cli, tmp_path: Path) -> None:
    good = write(tmp_path, "good.yaml", "extends: kaggle-t4\nloader:\n  batch_size: 128\n")
    r = cli("profiles", "validate", good, "cpu")
    assert r.code == 0 and "ok" in r.out


# One bad file per validation rule: (file text, the field the message must name, a phrase of the reason)
RULES = {
    "unknown key with did-you-mean": ("loader:\n  batch_sise: 3\n", "loader.batch_sise", "did you mean 'batch_size'"),
    "key in the wrong section": ("speed:\n  batch_size: 3\n", "speed.batch_size", "belongs under loader"),
    "zero batch": ("loader:\n  batch_size: 0\n", "loader.batch_size", "greater than 0"),
    "negative workers": ("loader:\n  num_workers: -2\n", "loader.num_workers", "greater than or equal to 0"),
    "zero accumulation": ("optim:\n  accumulation_steps: 0\n", "optim.accumulation_steps", "greater than 0"),
    "bf16 on a T4": ("extends: kaggle-t4\nspeed:\n  precision: bf16-mixed\n", "speed.precision", "7.5"),
    "bf16 on a V100": ("extends: gcp-v100\nspeed:\n  precision: bf16-mixed\n", "speed.precision", "7.0"),
    "loader RAM over budget": ("extends: aws-a10g\nloader:\n  num_workers: 32\n  prefetch_factor: 8\n",
                               "loader.num_workers", "32 workers x 8 prefetch x 230 MiB per batch = 57.4 GiB"),
    "unknown optimizer": ("optim:\n  optimizer: adamww\n", "optim.optimizer", "did you mean 'adamw'"),
    "unknown schedule": ("optim:\n  schedule: cosin\n", "optim.schedule", "did you mean 'cosine'"),
    "broken yaml": ("loader:\n  batch_size: 12\n   num_workers: 3\n", "bad.yaml:3:", "broken YAML"),
    "not a mapping": ("- a\n- b\n", "bad.yaml", "must be a mapping"),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_validation_rule_exits_2_naming_the_field(cli, tmp_path: Path, rule: str) -> None:
    text, field, reason = RULES[rule]
    r = cli("profiles", "validate", write(tmp_path, "bad.yaml", text))
    assert r.code == 2
    assert field in r.err and reason in r.err, r.err
    assert "Traceback" not in r.err


def test_validate_reports_all_problems_at_once(cli, tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.yaml", "extends: kaggle-t4\nloader:\n  batch_size: 0\n  num_workrs: 3\n"
                                      "speed:\n  precision: bf16-mixed\noptim:\n  optimizer: lamb\n")
    broken = write(tmp_path, "broken.yaml", "loader: [1,\n")
    r = cli("profiles", "validate", bad, broken, "--json")
    assert r.code == 2
    data = json.loads(r.out)
    assert data["valid"] is False and data["files"][broken]["valid"] is False
    errors = data["files"][bad]["errors"]
    assert len(errors) == 4
    for field in ("loader.batch_size", "loader.num_workrs", "speed.precision", "optim.optimizer"):
        assert any(field in e for e in errors), field


def test_mixed_precision_on_cpu_validates_with_a_note(cli, tmp_path: Path) -> None:
    f = write(tmp_path, "cpu16.yaml", "extends: cpu\nspeed:\n  precision: fp16-mixed\n")
    r = cli("profiles", "validate", f)
    assert r.code == 0 and "falls back" in r.out


def test_prefetch_and_persistent_with_0_workers_validate_with_a_note(cli, tmp_path: Path) -> None:
    f = write(tmp_path, "w0.yaml", "extends: kaggle-t4\nloader:\n  num_workers: 0\n")   # keeps prefetch 2, persistent
    r = cli("profiles", "validate", f)
    assert r.code == 0 and "prefetch_factor and persistent_workers ignored: no worker processes" in r.out
    f = write(tmp_path, "w1.yaml", "loader:\n  num_workers: 0\n  prefetch_factor: 2\n")
    r = cli("profiles", "validate", f)
    assert r.code == 0 and "prefetch_factor ignored: no worker processes" in r.out


def test_missing_file_and_unknown_preset(cli) -> None:
    r = cli("profiles", "show", "nosuch.yaml")
    assert r.code == 2 and "no such profile file" in r.err
    r = cli("profiles", "show", "kaggle")
    assert r.code == 2 and "kaggle-t4" in r.err


def test_debug_shows_a_traceback(tmp_path: Path) -> None:
    from conftest import run_subprocess
    bad = write(tmp_path, "bad.yaml", "loader:\n  batch_size: 0\n")
    plain = run_subprocess("profiles", "validate", bad)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    debug = run_subprocess("--debug", "profiles", "validate", bad)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


@pytest.mark.parametrize("gpus, batch, workers, lr", [(1, 256, 12, 0.5), (2, 512, 24, 1.0), (4, 1024, 48, 2.0),
                                                      (8, 2048, 96, 4.0)])
def test_show_the_a10g_notes_multi_gpu_table(cli, gpus: int, batch: int, workers: int, lr: float) -> None:
    """optimal-single-gpu-a10g.md, "Multi-GPU Calculations": one A10G per machine, N machines."""
    res = cli("profiles", "show", "aws-a10g", "--nnodes", str(gpus), "--json")
    assert res.code == 0, res.err
    d = json.loads(res.out)
    assert d["provenance"]["world.nodes"] == "flag --nnodes"
    derived = d["derived"]
    assert (derived["effective_batch"], derived["total_workers"], derived["scaled_lr"]) == (batch, workers, lr)
    assert derived["loader_ram_bytes"] == json.loads(cli("profiles", "show", "aws-a10g", "--json").out)[
        "derived"]["loader_ram_bytes"], "loader RAM is per machine: one GPU each, so it does not grow"


def test_validate_json_with_problems_is_one_document_with_the_error_inside(cli, tmp_path: Path) -> None:
    """An invalid file under --json: exit 2 through UserError (not a bare exit), the report and the error in one
    JSON object on stdout, and the same one-line reasons on stderr as without --json."""
    bad = write(tmp_path, "bad.yaml", "loader:\n  batch_size: 0\n")
    r = cli("profiles", "validate", bad, "--json")
    assert r.code == 2
    data = json.loads(r.out)  # one document: a second one would make this fail
    assert data["valid"] is False and data["files"][bad]["valid"] is False
    assert data["error"]["code"] == 2 and "1 of 1 profile file(s) invalid" in data["error"]["title"]
    assert any("loader.batch_size" in p["where"] + p["message"] for p in data["error"]["problems"])
    assert "error:" in r.err and "loader.batch_size" in r.err
