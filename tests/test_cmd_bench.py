"""`fasttrain bench ...` through the real entry point: exit codes, --json keys, result.json in the run dir."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_bench_loader import tiny_image_folder

from fasttrain.bench.results import new_bench_dir, read_result

SMALL = ["--profile", "cpu", "--image-size", "16"]


def test_speedups_json_and_result_file(cli, tmp_path: Path) -> None:
    out = tmp_path / "sp"
    r = cli("bench", "speedups", "--model", "tiny_cnn", *SMALL, "--batch-size", "8", "--steps", "1", "--rounds", "1",
            "--warmup", "1", "--only", "channels_last,fp16", "--json", "--out", str(out))
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert {"rows", "device", "batch_size", "image_size", "samples", "product_of_singles", "model", "profile",
            "kind", "machine", "result_path"} <= set(data)
    by = {row["setting"]: row for row in data["rows"]}
    assert by["channels_last"]["status"] == "measured" and by["fp16"]["status"] == "skipped"
    assert data["batch_size"] == 8 and data["image_size"] == 16 and data["kind"] == "speedups"
    saved = read_result(out)
    assert saved["rows"] == data["rows"] and saved["machine"]["cores"] >= 1


def test_speedups_human_output_has_the_table_and_no_escape_codes(cli, tmp_path: Path) -> None:
    r = cli("bench", "speedups", "--model", "tiny_cnn", *SMALL, "--batch-size", "4", "--steps", "1", "--rounds", "1",
            "--warmup", "1", "--only", "larger_batch,tf32", "--out", str(tmp_path / "h"))
    assert r.code == 0, r.err
    assert "fp32 baseline" in r.out and "skipped" in r.out and "Ampere" in r.out
    assert "1.1x (2 notes)" in r.out and "larger_batch: 1.5x aggressive-a10g-imagenet" in r.out  # the claims
    assert "\x1b[" not in r.out
    assert (tmp_path / "h" / "result.json").is_file()


@pytest.mark.parametrize("args,needle", [
    (["bench", "speedups", "--only", "chanels_last"], "channels_last"),          # did-you-mean
    (["bench", "speedups", "--model", "resnet_nope", *SMALL], "--model"),
    (["bench", "speedups", "--batch-size", "lots", *SMALL, "--model", "tiny_cnn"], "--batch-size"),
    (["bench", "loader", "--prefetch", "two"], "--prefetch"),
    (["bench", "loader", "--data", "/no/such/dir", *SMALL], "/no/such/dir"),
    (["bench", "batch", "--profile", "no-such-profile"], "no-such-profile"),
    (["bench", "speedups", "--set", "loader.batch_size=-1"], "loader.batch_size"),
])
def test_bad_input_exits_2_with_a_reason(cli, args: list[str], needle: str) -> None:
    r = cli(*args)
    assert r.code == 2, (r.out, r.err)
    assert needle in r.err and "Traceback" not in r.err


def test_batch_json_finds_a_tested_size_and_caches(cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FASTTRAIN_CACHE", str(tmp_path / "cache"))
    args = ["bench", "batch", "--model", "tiny_cnn", *SMALL, "--num-classes", "4", "--max-batch", "8", "--json"]
    r = cli(*args, "--out", str(tmp_path / "b1"))
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert {"batch", "accumulation", "effective_batch", "target_effective_batch", "search", "message", "device",
            "precision", "note"} <= set(data)
    assert data["search"]["batch"] == 8 and 8 in data["search"]["succeeded"]  # CPU: capped, every size ran
    assert data["search"]["capped_by"] == "max_batch" and not data["search"]["from_cache"]
    assert data["batch"] * data["accumulation"] >= 64  # the cpu profile's 64 samples per step, kept
    assert (tmp_path / "cache" / "batch_cache.json").is_file()
    again = json.loads(cli(*args, "--out", str(tmp_path / "b2")).out)
    assert again["search"]["from_cache"] and again["batch"] == data["batch"]
    higher = json.loads(cli(*args[:-2], "16", "--json", "--out", str(tmp_path / "b3")).out)  # --max-batch 16
    assert not higher["search"]["from_cache"] and higher["search"]["batch"] == 16  # a higher cap searches again


def test_loader_sweep_on_a_tiny_folder_writes_a_valid_profile(cli, tmp_path: Path) -> None:
    folder = tiny_image_folder(tmp_path / "imgs")
    written = tmp_path / "fast.yaml"
    r = cli("bench", "loader", "--data", str(folder), *SMALL, "--batch-size", "4", "--max-workers", "1",
            "--prefetch", "2", "--rounds", "1", "--batches", "2", "--model", "none", "--json",
            "--write-profile", str(written), "--out", str(tmp_path / "l"))
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert {"points", "knee", "recommended", "best", "training", "ram_budget_bytes", "samples", "cores",
            "speedup_over_0_workers", "profile_written", "kind", "machine"} <= set(data)
    assert [(p["workers"], p["prefetch"]) for p in data["points"]] == [(0, None), (1, 2)]
    assert data["training"]["keeps_up"] is None
    from fasttrain.profiles import presets

    prof = presets.resolve(str(written), env={}).profile
    assert prof.loader.num_workers == data["recommended"]["workers"] == 1
    assert read_result(tmp_path / "l")["recommended"] == data["recommended"]


def test_bench_dirs_are_unique(tmp_path: Path) -> None:
    first = new_bench_dir("loader", tmp_path, now=0)
    first.mkdir(parents=True)
    assert new_bench_dir("loader", tmp_path, now=0).name == "bench-loader-19700101-000000-2"


def test_speedups_with_batch_size_auto_uses_the_searched_batch(cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("FASTTRAIN_CACHE", str(tmp_path / "cache"))
    r = cli("bench", "speedups", "--model", "tiny_cnn", *SMALL, "--batch-size", "auto", "--steps", "1",
            "--rounds", "1", "--warmup", "1", "--only", "tf32", "--json", "--out", str(tmp_path / "a"))
    assert r.code == 0, r.err
    data = json.loads(r.out)
    cached = json.loads((tmp_path / "cache" / "batch_cache.json").read_text())
    (entry,) = cached.values()
    assert entry["batch"] in entry["succeeded"]
    assert data["batch_size"] == min(entry["batch"], 64)  # as train would: the cpu profile's 64 per step kept
    assert "batch auto" in data["batch_message"]


def _speedups_result(rate_cl: float, base: float = 100.0) -> dict:
    from fasttrain.bench.results import envelope

    rows = [{"setting": "baseline", "images_per_s": base, "speedup": 1.0, "status": "measured"},
            {"setting": "channels_last", "images_per_s": rate_cl, "speedup": rate_cl / base, "status": "measured"},
            {"setting": "tf32", "status": "skipped", "reason": "needs Ampere"}]
    return envelope("speedups", {"rows": rows})


def test_compare_two_results(cli, tmp_path: Path) -> None:
    from fasttrain.bench.results import compare, write_result

    out = compare(_speedups_result(90), _speedups_result(180))
    by = {r["key"]: r for r in out["rows"]}
    assert by["channels_last"]["ratio"] == pytest.approx(2.0) and by["tf32"]["ratio"] is None
    write_result(tmp_path / "a", _speedups_result(90))
    write_result(tmp_path / "b", _speedups_result(45))
    r = cli("bench", "compare", str(tmp_path / "a"), str(tmp_path / "b" / "result.json"), "--json")
    assert r.code == 0, r.err
    assert {row["key"]: row["ratio"] for row in json.loads(r.out)["rows"]}["channels_last"] == pytest.approx(0.5)
    r = cli("bench", "compare", str(tmp_path / "a"), str(tmp_path / "b"))
    assert r.code == 0 and "0.50x" in r.out
    write_result(tmp_path / "c", {"kind": "loader", "points": []})
    assert cli("bench", "compare", str(tmp_path / "a"), str(tmp_path / "c")).code == 2
    assert cli("bench", "compare", str(tmp_path / "a"), str(tmp_path / "missing")).code == 2
