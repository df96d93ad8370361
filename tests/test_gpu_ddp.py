"""CUDA: a one-process data-parallel run over NCCL (`--nproc-per-node 1` on a GPU; marker `gpu`).

The launcher starts one torchrun worker; it joins an NCCL process group, trains inside DistributedDataParallel
on cuda:0 and writes the same files as a plain run. Its loss curve follows the plain (non-DDP) run of the same
settings, and its checkpoint holds the plain model's keys (no "module." prefix).
"""
from __future__ import annotations

import pytest
from conftest import run_subprocess
from gpu_helpers import DETERMINISTIC, checkpoint, summary, write_profile
from loop_helpers import write_image_folder

pytestmark = pytest.mark.gpu


@pytest.mark.timeout(900)
def test_one_process_nccl_ddp_run_matches_the_plain_run(tmp_path) -> None:
    write_image_folder(tmp_path / "data")
    write_profile(tmp_path / "ddp.yaml", loader=DETERMINISTIC["loader"], speed=DETERMINISTIC["speed"])
    base = ("train", "--profile", "ddp.yaml", "--data", "data", "--model", "tiny_cnn")
    env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8", "OMP_NUM_THREADS": "1"}

    ddp = run_subprocess(*base, "--nproc-per-node", "1", "--run-name", "ddp", env=env, cwd=tmp_path, timeout=600)
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    plain = run_subprocess(*base, "--run-name", "plain", env=env, cwd=tmp_path, timeout=600)
    assert plain.returncode == 0, plain.stderr[-3000:]

    one, single = summary(tmp_path / "runs" / "ddp"), summary(tmp_path / "runs" / "plain")
    assert one["device"] == "cuda" and one["world_size"] == 1 and one["epochs_run"] == 2
    ddp_notes = [n for n in one["notes"] if n.startswith("DDP:")]
    assert ddp_notes and "backend nccl" in ddp_notes[0] and "rank 0 of 1" in ddp_notes[0], one["notes"]
    assert not [n for n in single["notes"] if n.startswith("DDP:")]
    for a, b in zip(single["history"], one["history"], strict=True):
        assert a["train_images"] == b["train_images"] and a["val_images"] == b["val_images"]
        # cuDNN may pick other algorithms in the two processes: close, not bit-equal
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-3)
        assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-3)
    w_ddp = checkpoint(tmp_path / "runs" / "ddp" / "last.pt")
    w_plain = checkpoint(tmp_path / "runs" / "plain" / "last.pt")
    assert set(w_ddp["model"]) == set(w_plain["model"]), "rank 0 saves the plain model's keys"
    assert w_ddp["plan"]["device"] == "cuda"
    assert not (tmp_path / "runs" / "ddp" / "rank1").exists()
