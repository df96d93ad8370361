"""Before the process group exists: a torchrun worker's GPU chosen first, and one answer decided by rank 0 for all.

setup/prepare.py plans the run before parallel/ddp.py joins the process group, so two things happen here:
- claim_device(): a worker sets its own GPU (LOCAL_RANK) before anything touches CUDA. Without it every rank's
  first CUDA call (the probe's free-memory reading, the batch search) lands on cuda:0 at once.
- rank_zero_decides(): rank 0 computes a value (the `--batch-size auto` search) and every rank reads it, through
  the key-value store torchrun's agent already hosts at MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE),
  or else one rank 0 hosts there itself with `multi_tenant=True`, the way torch.distributed's own env://
  rendezvous does, so init_process_group later shares that server instead of failing to bind the port.
torch is imported inside the functions (prepare.py imports this module before it knows the device).
"""
from __future__ import annotations

import datetime
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from fasttrain.core.errors import JobFailed, Problem, UserError
from fasttrain.train.types import WorkerWorld

# How long the other ranks wait for rank 0's answer: a batch search of a large model takes minutes.
DECIDE_TIMEOUT = datetime.timedelta(minutes=30)
_STORES: list[Any] = []  # rank 0's hosted store stays alive until the process group takes the port over


def claim_device(world: WorkerWorld | None, *, launching: bool = False) -> int | None:
    """The GPU this process trains on, taken before any other CUDA work -> its index; None without CUDA, in the
    launcher of several workers (it trains on none: it must hold no context) and where LOCAL_RANK has no GPU
    (setup/world.py refuses that with the reason). A torchrun worker sets LOCAL_RANK's; one process initialises
    CUDA on its current device, so the probe reads what that device has free (hardware/machine.py)."""
    import torch
    if launching or not torch.cuda.is_available():
        return None
    if world is None:
        torch.cuda.init()
        return torch.cuda.current_device()
    if world.local_rank >= torch.cuda.device_count():
        return None
    torch.cuda.set_device(world.local_rank)
    return world.local_rank


def store_key(name: str, env: Mapping[str, str] = os.environ) -> str:
    """A key of this job and attempt (the agent's store lives across torchrun's restarts). Pure."""
    run = env.get("TORCHELASTIC_RUN_ID", "none")
    attempt = env.get("TORCHELASTIC_RESTART_COUNT", "0")
    return f"fasttrain/{run}/{attempt}/{name}"


def _store(world: WorkerWorld) -> Any:
    from torch.distributed import TCPStore
    host, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT", "")
    if not host or not port.isdigit():
        raise UserError([Problem("--batch-size", "auto in a torchrun worker needs MASTER_ADDR and MASTER_PORT, "
                                 "where rank 0 hands its search result to the other ranks",
                                 "start the job with torchrun or fasttrain train --nproc-per-node N, or give "
                                 "--batch-size N", "auto")])
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = TCPStore(host, int(port), world.world_size, is_master=not agent and world.rank == 0,
                     timeout=DECIDE_TIMEOUT, wait_for_workers=False, multi_tenant=True)
    if world.rank == 0:
        _STORES.append(store)
    return store


def rank_zero_decides(world: WorkerWorld, name: str, decide: Callable[[], Any]) -> Any:
    """decide() on rank 0 (a JSON value), the same value on every rank. A UserError on rank 0 reaches every rank
    as its own (each exits 2 with the reason), not as a 30-minute wait."""
    store = _store(world)
    key = store_key(name)
    if world.rank == 0:
        try:
            value = decide()
        except UserError as exc:
            store.set(key, json.dumps({"problems": [[p.where, p.message, p.fix] for p in exc.problems]}))
            raise
        except BaseException as exc:
            store.set(key, json.dumps({"failed": f"{type(exc).__name__}: {exc}"[:300]}))
            raise
        store.set(key, json.dumps({"value": value}))
        return value
    answer = json.loads(store.get(key))
    if "problems" in answer:
        raise UserError([Problem(where, message, fix) for where, message, fix in answer["problems"]])
    if "failed" in answer:
        raise JobFailed(f"rank 0 could not decide {name}: {answer['failed']}")
    return answer["value"]
