"""Issue 24, finding 2: `--batch-size auto` did GPU work before each rank had chosen its GPU. Under torchrun every
rank searched on cuda:0 at once (and could settle on different splits); under `--nproc-per-node` the launcher
kept a CUDA context on GPU 0 for the whole job. Now a worker sets its GPU first, the launcher searches in a
child process and hands the answer to its workers, and under a bare torchrun rank 0 searches for everyone."""
from __future__ import annotations

import socket
import threading

import pytest

from fasttrain.core.errors import UserError
from fasttrain.train.parallel import agree
from fasttrain.train.types import TrainArgs, WorkerWorld

WORKER_ENV = {"RANK": "1", "LOCAL_RANK": "1", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}


def _no_search_here(monkeypatch: pytest.MonkeyPatch) -> None:
    def searched(*args, **kwargs):
        raise AssertionError("the batch search ran in this process")
    monkeypatch.setattr("fasttrain.train.setup.batch_search.auto_batch_flags", searched)


def test_the_launchers_search_runs_in_a_child_process(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_search_here(monkeypatch)
    res = cli("train", "--profile", "cpu", "--data", "synthetic", "--model", "tiny_cnn", "--nproc-per-node", "2",
              "--batch-size", "auto", "--dry-run", "--json")
    assert res.code == 0, res.err
    assert "batch auto:" in res.out


def test_a_worker_trains_the_split_its_launcher_handed_it(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {**WORKER_ENV, "FASTTRAIN_MICRO_BATCH": "8,4",
                       "FASTTRAIN_AUTO_BATCH_NOTE": "batch auto: the launcher's search"}.items():
        monkeypatch.setenv(key, value)
    _no_search_here(monkeypatch)
    from fasttrain.train.setup.prepare import prepare
    prep = prepare(TrainArgs(profile="cpu", data="synthetic", model="tiny_cnn", batch_size="auto", dry_run=True))
    assert (prep.plan.batch_size, prep.plan.accumulation_steps) == (8, 4)
    assert "batch auto: the launcher's search" in prep.plan.notes


def test_a_worker_sets_its_gpu_before_anything_touches_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    for key, value in WORKER_ENV.items():
        monkeypatch.setenv(key, value)
    calls: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: calls.append(f"set_device({index})"))

    class Probed(Exception):
        pass

    def probe():
        calls.append("probe")
        raise Probed

    monkeypatch.setattr("fasttrain.train.setup.prepare.probe", probe)
    from fasttrain.train.setup.prepare import prepare
    with pytest.raises(Probed):
        prepare(TrainArgs(profile="cpu", data="synthetic", batch_size="auto", dry_run=True))
    assert calls == ["set_device(1)", "probe"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("agent_store", [True, False])
def test_under_bare_torchrun_rank_zero_decides_for_every_rank(monkeypatch: pytest.MonkeyPatch,
                                                              agent_store: bool) -> None:
    from torch.distributed import TCPStore
    port = _free_port()
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "t")
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", str(agent_store))
    agent = TCPStore("127.0.0.1", port, 3, is_master=True, wait_for_workers=False) if agent_store else None
    answers: dict[int, object] = {}
    searched: list[int] = []

    def rank(r: int) -> None:
        answers[r] = agree.rank_zero_decides(WorkerWorld(r, r, 2, 2), "auto_batch",
                                             lambda: searched.append(r) or [96, 2, "why"])

    zero = threading.Thread(target=rank, args=(0,))
    zero.start()
    rank(1)
    zero.join(30)
    assert answers == {0: [96, 2, "why"], 1: [96, 2, "why"]} and searched == [0]
    del agent


def test_a_refusal_on_rank_zero_reaches_the_others_as_their_own(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed import TCPStore

    from fasttrain.core.errors import Problem
    port = _free_port()
    for key, value in {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": "u",
                       "TORCHELASTIC_USE_AGENT_STORE": "True"}.items():
        monkeypatch.setenv(key, value)
    agent = TCPStore("127.0.0.1", port, 3, is_master=True, wait_for_workers=False)

    def refuse() -> None:
        raise UserError([Problem("--model", "no such model", "see timm.list_models()")])

    def zero() -> None:
        with pytest.raises(UserError):
            agree.rank_zero_decides(WorkerWorld(0, 0, 2, 2), "auto_batch", refuse)

    thread = threading.Thread(target=zero)
    thread.start()
    with pytest.raises(UserError, match="no such model"):
        agree.rank_zero_decides(WorkerWorld(1, 1, 2, 2), "auto_batch", refuse)
    thread.join(30)
    del agent


def test_store_keys_belong_to_one_attempt_of_one_job() -> None:
    assert agree.store_key("auto_batch", {"TORCHELASTIC_RUN_ID": "abc", "TORCHELASTIC_RESTART_COUNT": "2"}) == \
        "fasttrain/abc/2/auto_batch"
