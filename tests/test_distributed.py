"""Data-parallel training with real gloo process groups on the CPU.

In-process, a world of one (the same DDP code path a single GPU takes): no_sync inside accumulation windows,
the stop vote. Real subprocesses, 2 CPU processes: the loss curve and final weights match a single process
with the same global batch; `torchrun -m fasttrain train` works; a SIGTERM that reaches only rank 1 stops both
ranks at the same step with a checkpoint, and --resume under 2 processes ends bit-identical to an uninterrupted
2-process run; a rendezvous that never forms ends with a clear exit 2.
"""
from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import child_env, run_subprocess
from loop_helpers import cpu_plan, make_trainer, tiny_mlp, tiny_run_folder

from fasttrain.train.state import checkpoint as ck

# A real model file in the run's folder (`--model nobn:net`): convolutions, no batch norm, whose batch
# statistics would make 2 x 4 images differ from 8 by design.
NOBN = """\
import torch
from torch import nn


def net(num_classes=3):
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1),
                         nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(32, num_classes))
"""
# 24 train images: 3 steps of a global batch of 8 per epoch, 3 epochs.
BASE = ("--profile", "tiny.yaml", "--data", "data", "--model", "nobn:net", "--epochs", "3", "--quiet")
ENV = {"OMP_NUM_THREADS": "1"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- a world of one, in this process ----------------------------------------------------------------------
@pytest.fixture
def one_rank(monkeypatch: pytest.MonkeyPatch):
    from fasttrain.train.parallel import ddp as distributed
    from fasttrain.train.types import WorkerWorld
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(_free_port()))
    with distributed.joined(WorkerWorld(0, 0, 1, 1), "cpu") as ctx:
        yield ctx


def _trainer(ctx, accumulation: int, stop=None):
    plan, profile = cpu_plan(optim={"accumulation_steps": accumulation}, speed={"precision": "fp32"})
    return make_trainer(plan, profile.optim, tiny_mlp(in_features=3 * 16 * 16), batches=4, dist=ctx, stop=stop)


def _batches(n: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 3, (4,), generator=g)) for _ in range(n)]


def test_gradients_are_all_reduced_once_per_accumulation_window(one_rank) -> None:
    calls: list[int] = []

    def counting(state, bucket):
        calls.append(1)
        done = torch.futures.Future()
        done.set_result(bucket.buffer())
        return done

    trainer = _trainer(one_rank, accumulation=2)
    trainer.engine.top.register_comm_hook(None, counting)
    row = trainer.train_epoch(_batches(4), 0)
    assert trainer.engine.schedule.step == 2 and len(calls) == 2, (
        "no_sync must skip the first micro-step of each window"
    )
    assert row["train_images"] == 16 and trainer.engine.backoff.enabled is False


def test_a_stop_is_acted_on_one_step_after_it_was_voted(one_rank) -> None:
    from fasttrain.train.loop.trainer import Interrupted
    from fasttrain.train.signals.lifecycle import GracefulStop

    stop = GracefulStop()
    stop.requested = signal.SIGTERM
    trainer = _trainer(one_rank, accumulation=1, stop=stop)
    with pytest.raises(Interrupted) as exc:
        trainer.train_epoch(_batches(4), 0)
    assert exc.value.step == 2 and exc.value.signal_name == "SIGTERM"


def test_stop_vote_takes_the_largest_signal_of_the_previous_post(one_rank) -> None:
    from fasttrain.train.parallel.ddp import StopVote

    vote = StopVote(one_rank)
    assert vote.exchange(signal.SIGTERM, False) == (0, False)
    assert vote.exchange(0, True) == (signal.SIGTERM, False)
    assert vote.drain() == (0, True)
    assert one_rank.sums(1.5, 2) == [1.5, 2.0] and one_rank.max(7) == 7 and one_rank.gather("x") == ["x"]


# -- two processes ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tiny_run_folder(tmp_path_factory.mktemp("ddp"))
    (root / "nobn.py").write_text(NOBN)
    return root


def _train(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_subprocess("train", *BASE, *args, env={**ENV, **(env or {})}, cwd=root, timeout=300)


def _summary(root: Path, name: str) -> dict:
    return json.loads((root / "runs" / name / "summary.json").read_text())


def _weights(root: Path, name: str) -> dict[str, torch.Tensor]:
    return ck.load(root / "runs" / name / "last.pt")["model"]  # whole: a best epoch's are in model.safetensors


@pytest.fixture(scope="module")
def two_procs(work: Path) -> Path:
    """The reference 2-process run, started by torchrun itself: 2 x 4 images per step."""
    full = child_env(ENV)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "fasttrain",
            "train",
            *BASE,
            "--set",
            "loader.batch_size=4",
            "--run-name",
            "ddp",
        ],
        capture_output=True,
        text=True,
        env=full,
        cwd=work,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return work / "runs" / "ddp"


def test_two_processes_follow_the_single_process_loss_curve(work: Path, two_procs: Path) -> None:
    single = _train(work, "--set", "loader.batch_size=8", "--run-name", "single")
    assert single.returncode == 0, single.stderr[-3000:]
    one, two = _summary(work, "single"), _summary(work, "ddp")
    assert two["world_size"] == 2 and one["world_size"] == 1
    for a, b in zip(one["history"], two["history"], strict=True):
        assert a["train_images"] == b["train_images"] == 24 and a["val_images"] == b["val_images"] == 12
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-5)
        assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)
        assert b["val_acc1"] == a["val_acc1"] and b["lr"] == pytest.approx(a["lr"])
    w1, w2 = _weights(work, "single"), _weights(work, "ddp")
    assert set(w1) == set(w2), "rank 0 saves the plain model's keys (no DDP 'module.' prefix)"
    for key in w1:
        torch.testing.assert_close(w2[key], w1[key], rtol=1e-5, atol=1e-6)
    assert not (work / "runs" / "ddp" / "rank1").exists()


def test_sigterm_on_one_rank_stops_both_then_resume_under_two_processes(work: Path, two_procs: Path) -> None:
    cut = _train(
        work,
        "--set",
        "loader.batch_size=4",
        "--nproc-per-node",
        "2",
        "--run-name",
        "cut",
        env={"FASTTRAIN_TEST_SIGNAL_AT_STEP": "4", "FASTTRAIN_TEST_SIGNAL_RANK": "1"},
    )
    assert cut.returncode == 0, cut.stderr[-3000:]
    # Rank 1 got the signal after step 4; the vote reaches every rank one step later: both stop after step 5.
    assert "stopped by SIGTERM after optimizer step 5 (epoch 2, batch 2)" in cut.stderr
    assert "--nproc-per-node 2" in cut.stderr.split("resume with:")[-1]
    saved = torch.load(work / "runs" / "cut" / "last.pt", map_location="cpu", weights_only=False)
    assert saved["schedule"]["step"] == 5 and len(saved["rng_per_rank"]) == 2

    alone = _train(work, "--resume", str(work / "runs" / "cut"))
    assert alone.returncode == 2 and "was written with world size 2, this run would use 1" in alone.stderr

    resumed = _train(work, "--resume", str(work / "runs" / "cut"), "--nproc-per-node", "2")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ref, out = _weights(work, "ddp"), _weights(work, "cut")
    for key in ref:
        assert torch.equal(ref[key], out[key]), key
    assert [r["train_loss"] for r in _summary(work, "cut")["history"]] == [
        r["train_loss"] for r in _summary(work, "ddp")["history"]
    ]


def test_a_rendezvous_that_does_not_form_is_a_clear_error(work: Path) -> None:
    port = _free_port()
    proc = _train(
        work,
        "--nproc-per-node",
        "1",
        "--nnodes",
        "2",
        "--node-rank",
        "0",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-timeout",
        "3",
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"--rdzv-endpoint: the nodes did not meet at 127.0.0.1:{port} within 3 s" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_sigterm_to_the_launcher_reaches_every_worker(work: Path) -> None:
    """Preemption as a scheduler does it: SIGTERM to the process the user started (the agent), which passes it
    on; the workers stop at one agreed step, rank 0 writes the checkpoint, the command exits 0."""
    full = child_env(ENV)
    args = [a if a != "3" else "500" for a in BASE]  # long enough that the signal lands mid-run
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fasttrain",
            "train",
            *args,
            "--set",
            "loader.batch_size=4",
            "--nproc-per-node",
            "2",
            "--run-name",
            "agent",
        ],
        cwd=work,
        env=full,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    metrics = work / "runs" / "agent" / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.exists() and metrics.stat().st_size) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert re.search(r"fasttrain: stopped by SIGTERM after optimizer step \d+", err), err[-3000:]
    assert "resume with: fasttrain train --resume" in err and "Traceback" not in err
    saved = torch.load(work / "runs" / "agent" / "last.pt", map_location="cpu", weights_only=False)
    assert len(saved["rng_per_rank"]) == 2
