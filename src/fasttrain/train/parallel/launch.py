"""`fasttrain train --nproc-per-node N [--nnodes M --node-rank R --rdzv-endpoint HOST:PORT]`: start the run
through PyTorch's own elastic agent (torch.distributed.run, the code behind `torchrun`), not a launcher of ours.

The process the user started becomes the agent: it checks the arguments, then torch.distributed.run starts N
workers, each `python -m fasttrain <the same arguments minus the launch flags>` with RANK, WORLD_SIZE,
LOCAL_RANK, ... in its environment (worker_world() reads them; `torchrun -m fasttrain train ...` gives the same).
One machine uses a standalone rendezvous on a free local port; several use the static one (node 0 hosts the
store at --rdzv-endpoint, so global rank 0, the one that writes checkpoints, is always on node 0).
The agent forwards SIGTERM/SIGINT to the workers (they live in their own sessions), which agree on a step,
save and stop (ddp.StopVote); a worker that fails makes the agent stop the others. The workers are told when
the command started (LAUNCHED_AT_ENV): a time budget and the time to accuracy count from there, not from their
own start seconds later.

Torch-free at import (cli.py imports it to remember the command line); torch.distributed.run is imported
only in launch().
"""
from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence

from fasttrain.core.errors import Problem, UserError
from fasttrain.train.types import LaunchSpec, WorkerWorld

# Flags this module consumes; workers get the command line without them (name -> takes a value).
LAUNCH_FLAGS = {"--nproc-per-node": True, "--nnodes": True, "--node-rank": True, "--rdzv-endpoint": True,
                "--rdzv-timeout": True}
# torchrun's env contract (torch.distributed.run docs: "Definitions").
WORKER_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")
# time.time() when the command that launched the workers started (run/start_time.py run_started_at reads it).
LAUNCHED_AT_ENV = "FASTTRAIN_LAUNCHED_AT"

_argv: list[str] = []


def remember_argv(argv: Sequence[str]) -> None:
    """cli.main records the arguments it was called with: the workers are started with the same ones."""
    _argv[:] = list(argv)


def invoked_argv() -> list[str]:
    return list(_argv)


def worker_world(env: Mapping[str, str] | None = None) -> WorkerWorld | None:
    """The torchrun worker environment, or None when this process was not started by torchrun. Pure."""
    env = os.environ if env is None else env
    if not all(key in env for key in WORKER_ENV):
        return None
    try:
        rank, local_rank, world, local_world = (int(env[key]) for key in WORKER_ENV)
    except ValueError:
        return None
    return WorkerWorld(rank, local_rank, world, local_world)


def world_flags(nproc_per_node: int | None, nnodes: int | None, source: str = "") -> dict[str, tuple[str, int]]:
    """The profile keys that --nproc-per-node / --nnodes set (presets.resolve's flags): the job's shape wins over
    the profile's world section. `source` names both when they came from elsewhere (torchrun's environment)."""
    flags: dict[str, tuple[str, int]] = {}
    if nproc_per_node is not None:
        flags["world.gpus_per_node"] = (source or "--nproc-per-node", nproc_per_node)
    if nnodes is not None:
        flags["world.nodes"] = (source or "--nnodes", nnodes)
    return flags


def check_spec(spec: LaunchSpec) -> None:
    """Every problem with the launch flags at once, as a UserError (exit 2). Pure."""
    problems = []
    if spec.nproc_per_node < 1:
        problems.append(Problem("--nproc-per-node", "must be at least 1", value=spec.nproc_per_node))
    if spec.nnodes < 1:
        problems.append(Problem("--nnodes", "must be at least 1", value=spec.nnodes))
    elif not 0 <= spec.node_rank < spec.nnodes:
        problems.append(Problem("--node-rank", f"must be between 0 and {spec.nnodes - 1} for --nnodes {spec.nnodes}",
                                value=spec.node_rank))
    if spec.rdzv_timeout_s < 1:
        problems.append(Problem("--rdzv-timeout", "must be at least 1 second", value=spec.rdzv_timeout_s))
    if spec.nnodes > 1 and not spec.rdzv_endpoint:
        problems.append(Problem("--rdzv-endpoint", f"required with --nnodes {spec.nnodes}: the HOST:PORT of node 0, "
                                "reachable from every node", "e.g. --rdzv-endpoint 10.0.0.1:29400"))
    if spec.rdzv_endpoint:
        host, _, port = spec.rdzv_endpoint.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            problems.append(Problem("--rdzv-endpoint", "must be HOST:PORT", value=spec.rdzv_endpoint))
    if problems:
        raise UserError(problems)


def strip_launch_flags(argv: Sequence[str]) -> list[str]:
    """The command line without the launch flags (both `--flag value` and `--flag=value`). Pure."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if name in LAUNCH_FLAGS:
            skip = LAUNCH_FLAGS[name] and "=" not in arg
            continue
        out.append(arg)
    return out


def torchrun_argv(spec: LaunchSpec, worker_args: Sequence[str]) -> list[str]:
    """Arguments for torch.distributed.run that start `python -m fasttrain <worker_args>` on this node. Pure."""
    head = ["--nproc-per-node", str(spec.nproc_per_node), "--max-restarts", "0"]
    if spec.nnodes == 1 and not spec.rdzv_endpoint:
        head += ["--standalone"]
    else:
        host, _, port = (spec.rdzv_endpoint or "").rpartition(":")
        head += ["--nnodes", str(spec.nnodes), "--node-rank", str(spec.node_rank), "--rdzv-backend", "static",
                 "--master-addr", host, "--master-port", port, "--rdzv-conf", f"timeout={spec.rdzv_timeout_s}"]
    return [*head, "-m", "fasttrain", *worker_args]


def cpu_threads_per_process(cores: int, nproc_per_node: int, workers: int) -> int:
    """OMP threads for each CPU worker: the cores shared out, one per loader worker left free. Pure.
    (torchrun would set 1 with a warning; on the CPU that leaves cores idle.)"""
    return max(1, cores // max(1, nproc_per_node) - workers)


def launch(spec: LaunchSpec, worker_args: Sequence[str], *, omp_threads: int | None = None,
           started_at: float | None = None) -> int:
    """Run the job; -> the exit code this process should end with (0, or the first failed worker's).
    `started_at`: time.time() the command started, handed to the workers (None: they read their agent's start,
    this process's: run/start_time.run_started_at).
    A rendezvous that does not form within the timeout is a UserError (exit 2) that says what to check."""
    check_spec(spec)
    if omp_threads is not None and "OMP_NUM_THREADS" not in os.environ:
        os.environ["OMP_NUM_THREADS"] = str(omp_threads)
    if started_at is not None:
        os.environ[LAUNCHED_AT_ENV] = repr(started_at)
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import parse_args, run

    if not os.environ.get("FASTTRAIN_DEBUG"):
        _quiet_agent_logs()

    try:
        run(parse_args(torchrun_argv(spec, worker_args)))
    except ChildFailedError as exc:
        return _failed_exit_code(exc)
    except SignalException as exc:
        # The workers got the same signal from the agent and stopped at an agreed step (rank 0 said where).
        return _signal_exit_code(exc)
    except Exception as exc:
        signalled = _signal_in_chain(exc, SignalException)
        if signalled is not None:
            # torch's metrics wrapper (elastic/metrics/api.py, `prof`) has a `finally` that reads a local set
            # inside its `try`: a signal landing between the two turns the SignalException into an
            # UnboundLocalError. The agent still shut the workers down (its own `finally`), so this is the
            # same stop; seen once in CI as a traceback and exit 1.
            return _signal_exit_code(signalled)
        if _is_rendezvous_failure(exc):
            raise UserError([Problem("--rdzv-endpoint", f"the nodes did not meet at {spec.rdzv_endpoint} within "
                                     f"{spec.rdzv_timeout_s} s ({_first_line(exc)})",
                                     f"start the same command with --node-rank 0..{spec.nnodes - 1} on each of the "
                                     f"{spec.nnodes} machines, check HOST:PORT is node 0's and reachable, or raise "
                                     "--rdzv-timeout")]) from exc
        raise
    return 0


def _quiet_agent_logs() -> None:
    """The agent logs each failure and signal with a traceback or banner of its own, while the workers already
    said what went wrong and this module says what happened next. Its loggers set their own levels (from
    $LOGLEVEL) when created, so each one is turned down here, after the imports created them."""
    for name in list(logging.root.manager.loggerDict):
        if name.startswith(("torch.distributed.elastic", "torch.distributed.run", "torch.distributed.launcher")):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def _signal_exit_code(exc: BaseException) -> int:
    """130 for Ctrl-C, as the shell reports it; 0 for SIGTERM (a preemption the run survived, checkpoint written)."""
    import signal
    return 130 if getattr(exc, "sigval", None) == signal.SIGINT else 0


def _signal_in_chain(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first `kind` exception among `exc` and those it was raised from or while handling, or None."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, kind):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


def _failed_exit_code(exc: BaseException) -> int:
    """The exit code of the first worker that failed (its own message is already on stderr)."""
    failures = getattr(exc, "failures", {}) or {}
    if not failures:
        return 1
    # Keyed by global rank (a ProcessFailure itself knows only its local rank).
    rank, first = min(failures.items(), key=lambda item: getattr(item[1], "timestamp", 0))
    code = int(getattr(first, "exitcode", 1) or 1)
    if code < 0:  # killed by a signal: report it as the shell would
        print(f"fasttrain: worker rank {rank} was killed by signal {-code}", file=sys.stderr)
        return 128 - code
    return code


def _is_rendezvous_failure(exc: BaseException) -> bool:
    names = {type(e).__name__ for e in _chain(exc)}
    text = " ".join(str(e) for e in _chain(exc)).lower()
    return bool(names & {"RendezvousTimeoutError", "RendezvousClosedError", "RendezvousConnectionError",
                         "DistStoreError"}) or "waiting for clients" in text


def _chain(exc: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen


def _first_line(exc: BaseException) -> str:
    for e in _chain(exc):
        text = str(e).strip()
        if text:
            return text.splitlines()[0][:200]
    return type(exc).__name__
