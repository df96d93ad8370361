"""CUDA: running out of GPU memory for real (marker `gpu`).

The limit is real in both variants: "fraction" caps this process's caching allocator
(torch.cuda.set_per_process_memory_fraction), "ballast" fills the card with one tensor so cudaMalloc itself
fails. Either way torch raises its own OutOfMemoryError, the same on an 80 GB H100 and a 141 GB H200.
- `--batch-size auto` searches against it: sizes that ran out of memory are recorded, the answer ran, and
  accumulation keeps the profile's effective batch.
- A run whose first step does not fit backs off: the same data is retried as micro-batches of half the size
  (again and again if needed), the effective batch and LR stay, the epoch finishes.
ResNet-18 at 128 px in fp32 on synthetic data; the runs are in-process, where the limit applies.
"""
from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from gpu_helpers import finite, memory_limit, release_cuda, step_rows, summary, write_profile

pytestmark = pytest.mark.gpu
GIB = 2**30
PLAIN = {"precision": "fp32", "channels_last": False, "tf32": False, "cudnn_benchmark": False}


@pytest.fixture(autouse=True)
def _release() -> None:
    release_cuda()
    yield
    release_cuda()


@pytest.mark.parametrize("kind", ["fraction", "ballast"])
def test_batch_size_auto_searches_against_the_real_allocator(cli, tmp_path: Path, kind: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FASTTRAIN_CACHE", str(tmp_path / "cache"))  # no earlier search answers from the cache
    # The profile asks 4096 per step: far more than 4 GiB holds (ResNet-18 at 128 px, fp32: ~10 MB a sample).
    profile = write_profile(tmp_path / "gpu.yaml", loader={"batch_size": 4096, "image_size": 128, "num_workers": 0,
                                                           "prefetch_factor": None}, speed=PLAIN)
    with memory_limit(kind, 4 * GIB) as limit:
        res = cli("train", "--profile", str(profile), "--data", "synthetic", "--model", "resnet18",
                  "--batch-size", "auto", "--dry-run", "--json")
    assert res.code == 0, res.err[-3000:]
    plan = json.loads(res.out)["plan"]
    assert plan["device"] == "cuda"
    assert plan["batch_size"] < 4096 and plan["accumulation_steps"] >= 2, plan
    assert plan["batch_size"] * plan["accumulation_steps"] >= 4096, plan  # the profile's effective batch kept
    notes = [n for n in plan["notes"] if n.startswith("batch auto:")]
    assert notes and "ran out of memory" in notes[0], plan["notes"]

    entries = json.loads((tmp_path / "cache" / "batch_cache.json").read_text())
    assert len(entries) == 1, list(entries)
    entry = next(iter(entries.values()))
    failed = [t for t in entry["trials"] if not t["ok"]]
    ran = [t for t in entry["trials"] if t["ok"]]
    assert failed and all("out of memory" in t["reason"].lower() or "OutOfMemoryError" in t["reason"]
                          for t in failed), failed
    assert entry["smallest_failed"] is not None and entry["largest_ok"] < entry["smallest_failed"]
    assert entry["batch"] in [t["batch"] for t in ran] and plan["batch_size"] <= entry["batch"]
    assert all(t["peak_memory_bytes"] is not None and t["peak_memory_bytes"] > 0 for t in ran), ran
    if kind == "fraction":  # with a ballast, the process's allocated bytes include the ballast itself
        assert all(t["peak_memory_bytes"] <= limit for t in ran), ran


@pytest.mark.parametrize("kind", ["fraction", "ballast"])
def test_out_of_memory_in_a_run_halves_the_batch_and_keeps_the_effective_batch(cli, tmp_path: Path,
                                                                                kind: str) -> None:
    import torch
    # 2048 samples need ~20 GB of activations; 6 GiB hold the 4 synthetic batches (1.6 GB), the model and a
    # few hundred samples: the first step fails and the loop halves until a micro-batch fits.
    profile = write_profile(tmp_path / "gpu.yaml", loader={"batch_size": 2048, "image_size": 128, "num_workers": 0,
                                                           "prefetch_factor": None}, speed=PLAIN,
                            optim={"epochs": 1})
    with memory_limit(kind, 6 * GIB) as limit:
        torch.cuda.reset_peak_memory_stats(0)
        res = cli("train", "--profile", str(profile), "--data", "synthetic", "--model", "resnet18",
                  "--runs-dir", str(tmp_path / "runs"), "--run-name", "oom", "--json", "--quiet")
        peak = torch.cuda.max_memory_allocated(0)
    assert res.code == 0, res.err[-3000:]
    run = tmp_path / "runs" / "oom"
    result = summary(run)
    events = result["oom_backoffs"]
    assert events, "the first step fitted: no out-of-memory happened"
    first = events[0]
    assert (first["epoch"], first["batch"], first["batch_from"], first["batch_to"]) == (1, 1, 2048, 1024), first
    for before, after in itertools.pairwise(events):
        assert after["batch_from"] == before["batch_to"] and after["batch_to"] == -(-after["batch_from"] // 2)
    assert all(e["effective_batch"] == 2048 for e in events), events
    assert len({e["lr"] for e in events}) == 1, "the LR must not change with the micro-batch"
    micro = result["micro_batch"]
    assert micro == events[-1]["batch_to"] and micro < 2048
    assert micro * result["accumulation_steps"] >= 2048 and result["effective_batch"] == 2048
    assert result["epochs_run"] == 1 and finite(result["final_train_loss"])
    images = result["history"][0]["train_images"]
    assert images > 0 and images % 2048 == 0, "every loader batch was trained whole, as micro-batches"
    assert any(r["batch_size"] == micro for r in step_rows(run)), step_rows(run)
    if kind == "fraction":
        assert peak <= limit, (peak, limit)
