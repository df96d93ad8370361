"""launch.py: the arithmetic and argument handling around torch.distributed.run (pure; no process started),
and the launch errors a user meets before any worker starts (exit 2, one line each)."""
from __future__ import annotations

import json

import pytest
from loop_helpers import FIXTURES

from fasttrain.core.errors import UserError
from fasttrain.train.parallel import launch
from fasttrain.train.types import LaunchSpec


def test_strip_launch_flags_keeps_everything_else() -> None:
    argv = ["--debug", "train", "--nproc-per-node", "2", "--epochs", "3", "--nnodes=1", "--rdzv-timeout", "9",
            "--set", "loader.batch_size=4", "--node-rank=0", "--rdzv-endpoint", "h:1", "--quiet"]
    assert launch.strip_launch_flags(argv) == ["--debug", "train", "--epochs", "3", "--set", "loader.batch_size=4",
                                               "--quiet"]


def test_single_machine_uses_a_standalone_rendezvous() -> None:
    argv = launch.torchrun_argv(LaunchSpec(2), ["train", "--epochs", "1"])
    assert argv[:4] == ["--nproc-per-node", "2", "--max-restarts", "0"]
    assert "--standalone" in argv
    assert argv[-5:] == ["-m", "fasttrain", "train", "--epochs", "1"]


def test_several_machines_use_node_0_as_the_static_store() -> None:
    argv = launch.torchrun_argv(LaunchSpec(4, nnodes=2, node_rank=1, rdzv_endpoint="10.0.0.1:29400",
                                           rdzv_timeout_s=60), ["train"])
    joined = " ".join(argv)
    assert "--standalone" not in argv
    assert "--nnodes 2 --node-rank 1 --rdzv-backend static --master-addr 10.0.0.1 --master-port 29400" in joined
    assert "--rdzv-conf timeout=60" in joined


def test_the_torchrun_arguments_parse_as_torchrun_would() -> None:
    from torch.distributed.run import parse_args
    args = parse_args(launch.torchrun_argv(LaunchSpec(2, nnodes=2, node_rank=0, rdzv_endpoint="h:29400"), ["train"]))
    assert (args.nproc_per_node, args.nnodes, args.node_rank, args.rdzv_backend) == ("2", "2", 0, "static")
    assert args.module and args.training_script == "fasttrain" and args.training_script_args == ["train"]


@pytest.mark.parametrize("spec, where", [
    (LaunchSpec(0), "--nproc-per-node"),
    (LaunchSpec(1, nnodes=0), "--nnodes"),
    (LaunchSpec(1, nnodes=2, node_rank=2, rdzv_endpoint="h:1"), "--node-rank"),
    (LaunchSpec(1, nnodes=2), "--rdzv-endpoint"),
    (LaunchSpec(1, rdzv_endpoint="no-port"), "--rdzv-endpoint"),
    (LaunchSpec(1, rdzv_timeout_s=0), "--rdzv-timeout"),
])
def test_bad_launch_flags_are_named(spec: LaunchSpec, where: str) -> None:
    with pytest.raises(UserError) as err:
        launch.check_spec(spec)
    assert err.value.problems[0].where == where


def test_worker_world_reads_torchruns_environment() -> None:
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}
    world = launch.worker_world(env)
    assert world is not None and (world.rank, world.local_rank, world.nodes, world.is_main) == (3, 1, 2, False)
    assert launch.worker_world({"RANK": "0"}) is None
    assert launch.worker_world({**env, "RANK": "x"}) is None


def test_cpu_threads_share_the_cores_out() -> None:
    assert launch.cpu_threads_per_process(16, 2, 1) == 7
    assert launch.cpu_threads_per_process(2, 2, 1) == 1


# -- errors met on the command line (in-process: nothing is launched) ----------------------------------------
def test_node_flags_without_nproc_per_node(cli) -> None:
    res = cli("train", "--nnodes", "2", "--dry-run")
    assert res.code == 2 and "--nnodes: only means something with --nproc-per-node" in res.err
    assert "Traceback" not in res.err


def test_bad_spec_exits_2_before_anything_starts(cli) -> None:
    res = cli("train", "--nproc-per-node", "2", "--nnodes", "2", "--dry-run")
    assert res.code == 2 and "--rdzv-endpoint: required with --nnodes 2" in res.err


def test_more_cpu_processes_than_cores(cli) -> None:
    res = cli("train", "--nproc-per-node", "256", "--dry-run")
    assert res.code == 2 and "--nproc-per-node: 256 CPU processes on" in res.err


def test_a_multi_process_profile_without_a_launcher_says_how(cli, tmp_path) -> None:
    (tmp_path / "two.yaml").write_text("extends: cpu\nworld:\n  gpus_per_node: 2\n")
    res = cli("train", "--profile", str(tmp_path / "two.yaml"), "--dry-run")
    assert res.code == 2 and "add --nproc-per-node 2" in res.err


def test_the_dry_run_shows_the_whole_jobs_batch(cli) -> None:
    res = cli("train", "--nproc-per-node", "2", "--dry-run", "--json")
    assert res.code == 0, res.err
    plan = json.loads(res.out)["plan"]
    assert plan["world_size"] == 2 and plan["effective_batch"] == 2 * plan["batch_size"] * plan["accumulation_steps"]


def test_one_process_per_gpu_and_no_more() -> None:
    """The rule, against a hand-built report of a 4 x A10G machine (no GPU here)."""
    from fasttrain.hardware.report import HardwareReport
    from fasttrain.plan import make_plan
    from fasttrain.profiles import presets
    from fasttrain.train.setup.world import check_world
    report = HardwareReport.model_validate_json((FIXTURES / "reports" / "a10g_x4.json").read_text())
    for procs in (1, 4, 5):
        profile = presets.resolve("aws-a10g", sets=[f"world.gpus_per_node={procs}", "loader.num_workers=2"]).profile
        plan = make_plan(profile, report)
        assert plan.device == "cuda"
        if procs <= 4:
            check_world(plan, profile, report, launched=True)
        else:
            with pytest.raises(UserError, match="5 processes per node, but torch sees 4 GPU"):
                check_world(plan, profile, report, launched=True)


def test_a_worker_killed_by_a_signal_is_named_by_its_global_rank(capsys) -> None:
    """torchrun's failures are keyed by global rank; the earliest one decides the exit code, as a shell would."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
    late = ProcessFailure(local_rank=0, pid=11, exitcode=1, error_file="<none>")
    early = ProcessFailure(local_rank=1, pid=12, exitcode=-6, error_file="<none>")
    late.timestamp, early.timestamp = 200, 100
    code = launch._failed_exit_code(ChildFailedError("fasttrain", {0: late, 3: early}))
    assert code == 134
    assert "fasttrain: worker rank 3 was killed by signal 6" in capsys.readouterr().err


def _agent_interrupted_inside_torchs_metrics_wrapper(sig: int) -> None:
    """What torch's `metrics.prof` wrapper does when the signal lands between its `try:` and `start = ...`:
    the signal handler's SignalException is replaced by an UnboundLocalError from its `finally`."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    try:
        raise SignalException(f"Process {1} got signal: {sig}", sigval=sig)
    finally:
        start = locals()["start"]  # KeyError stands in for the UnboundLocalError: same chain, one frame
        print(start)


@pytest.mark.parametrize(("sig", "code"), [(15, 0), (2, 130)])
def test_a_signal_hidden_by_torchs_metrics_wrapper_is_still_a_clean_stop(monkeypatch, sig: int, code: int) -> None:
    """Seen in CI: SIGTERM to the launcher printed a traceback and exited 1, because torch's wrapper masked the
    SignalException. The agent had shut the workers down all the same; the launcher reports the stop."""
    import signal as signal_module

    import torch.distributed.run as torch_run
    monkeypatch.setattr(torch_run, "run", lambda _args: _agent_interrupted_inside_torchs_metrics_wrapper(
        signal_module.Signals(sig)))
    assert launch.launch(LaunchSpec(2), ["train"]) == code


def test_an_error_without_a_signal_behind_it_is_not_taken_for_a_stop(monkeypatch) -> None:
    import torch.distributed.run as torch_run

    def broken(_args: object) -> None:
        raise RuntimeError("something else")
    monkeypatch.setattr(torch_run, "run", broken)
    with pytest.raises(RuntimeError, match="something else"):
        launch.launch(LaunchSpec(2), ["train"])
