"""What a run opens before its first step: the loaders (with a sampler that resumes mid-epoch), the run folder
and its log, and what the display knows of this machine's earlier measurements."""
from __future__ import annotations

import os
import random
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from fasttrain.train.state.run_state import RESUMED_FIELDS
from fasttrain.train.types import Prepared, TrainArgs, WorkerWorld

if TYPE_CHECKING:
    from fasttrain.datasets.build import SyntheticBatches
    from fasttrain.datasets.loaders import DecodedLoader, Loader
    from fasttrain.datasets.sampler import EpochSampler
    from fasttrain.train.loop.budget import TimeBudget
    from fasttrain.train.parallel.ddp import DistContext
    from fasttrain.train.run.runlog import RunLog
    from fasttrain.tuning.store import Measurement

    TrainLoader = Union[Loader, DecodedLoader, SyntheticBatches]

BUILT_IN_DATA = ("shapes", "synthetic")   # --data names that are not folders


def process_started_at(pid: int | None = None) -> float:
    """time.time() when this process (or process `pid`) started (its imports and start-up count in time to accuracy
    and in a time budget). On Linux from the process's age on the boot clock (process_age_s); psutil's create_time
    adds the boot time, which the kernel gives in whole seconds: on this project's VM it put the start 0.76 s too
    early."""
    import time
    try:
        with open(f"/proc/{pid or 'self'}/stat", encoding="ascii") as stat, \
                open("/proc/uptime", encoding="ascii") as up:
            age = process_age_s(stat.read(), up.read(), os.sysconf("SC_CLK_TCK"))
        if age is not None:
            return time.time() - age
    except (OSError, ValueError, AttributeError):
        pass
    import psutil
    return float(psutil.Process(pid).create_time())


def run_started_at(world: WorkerWorld | None, env: Mapping[str, str] | None = None) -> float:
    """time.time() the run's clock starts from: when the command the user ran started. This process's start, or
    in a torchrun worker the launcher's: `fasttrain train --nproc-per-node` hands its start to the workers
    (launch.LAUNCHED_AT_ENV); under a plain `torchrun` it is the start of torchrun's agent, the worker's parent
    (TORCHELASTIC_RUN_ID says the agent started it). The ranks of a job then count from nearly the same moment."""
    import contextlib
    import math
    import time

    from fasttrain.train.parallel.launch import LAUNCHED_AT_ENV
    env = os.environ if env is None else env
    if world is None:
        return process_started_at()
    try:
        given = float(env.get(LAUNCHED_AT_ENV, "nan"))
    except ValueError:
        given = math.nan
    if math.isfinite(given) and given <= time.time():
        return given
    if "TORCHELASTIC_RUN_ID" in env:
        with contextlib.suppress(Exception):  # the parent's start unreadable: this process's
            return min(process_started_at(os.getppid()), process_started_at())
    return process_started_at()


def process_age_s(stat: str, uptime: str, ticks_per_s: int) -> float | None:
    """Seconds since the process started, from /proc/self/stat (field 22: start time in clock ticks after boot)
    and /proc/uptime (seconds after boot, 10 ms resolution); None when they do not parse or disagree. Pure."""
    try:
        fields = stat[stat.rindex(")") + 2:].split()  # the name in parentheses may hold spaces and ')'
        started = int(fields[19]) / ticks_per_s         # field 22 of the whole line
        age = float(uptime.split()[0]) - started
    except (ValueError, IndexError, ZeroDivisionError):
        return None
    return age if age >= 0 else None


def time_budget(prep: Prepared, launched_at: float) -> tuple[TimeBudget, str] | None:
    """The run's time budget and where it came from, or None. A resume continues a --time-budget or --max-cost
    with what the checkpoint says is left; a --deadline is a clock time, the same for every process."""
    from datetime import datetime

    from fasttrain.train.loop.budget import TimeBudget
    from fasttrain.train.setup.budget_args import budget_seconds
    args = prep.args
    found = budget_seconds(args.time_budget, args.deadline, args.max_cost, prep.resolved.profile,
                           datetime.fromtimestamp(launched_at))
    if found is None:
        return None
    used = prep.resume.state.extras.budget_used_s if prep.resume is not None and args.deadline is None else None
    return TimeBudget(found[0], launched_at, used_before_s=used or 0.0), found[1]


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def open_data(prep: Prepared, dist: DistContext | None
              ) -> tuple[TrainLoader, Loader | DecodedLoader | None, EpochSampler | None, int]:
    """-> (train loader, validation loader or None, epoch sampler or None, batches in a whole epoch)."""
    from fasttrain.datasets.build import SyntheticBatches
    from fasttrain.train.state.resume import restore_sampler

    args, plan, bundle = prep.args, prep.plan, prep.bundle
    rank, world = (dist.rank, dist.size) if dist is not None else (0, 1)
    if bundle.kind == "synthetic":
        device = dist.device if dist is not None else plan.device
        synthetic = SyntheticBatches(plan.batch_size, plan.image_size, bundle.num_classes, device,
                                     steps=plan.iterations_per_epoch or 1, seed=args.seed + rank)
        return synthetic, None, None, len(synthetic)
    from fasttrain.datasets.loaders import build_loaders
    from fasttrain.datasets.sampler import EpochSampler
    epoch_sampler = EpochSampler(bundle.train_size, seed=args.seed, shuffle=True, rank=rank, world=world,
                                 drop_last=plan.drop_last)
    train_loader, val_loader = build_loaders(bundle, plan, seed=args.seed, epoch_sampler=epoch_sampler)
    batches = len(train_loader)  # a whole epoch's, before a resumed sampler shortens the first pass
    if prep.resume is not None:
        restore_sampler(epoch_sampler, prep.resume)
    return train_loader, val_loader, epoch_sampler, batches


def run_folder(prep: Prepared, dist: DistContext | None) -> Path:
    """The run folder: rank 0 makes it (a new name, or the resumed run's) and tells the other ranks."""
    from fasttrain.train.run.runlog import new_run_dir

    args = prep.args
    folder = new_run_dir(args.runs_dir, args.run_name, profile=prep.profile_ref.replace("/", "_").removesuffix(".yaml"),
                         resume=prep.resume is not None) if prep.is_main else None
    if dist is not None:
        folder = dist.broadcast(folder)
    assert folder is not None  # rank 0 always makes one, and every other rank receives it
    return folder


def open_runlog(prep: Prepared, folder: Path) -> RunLog:
    """The run log, with the resolved profile written first; a resumed run's rows past its checkpoint go."""
    from fasttrain.train.run.runlog import RunLog

    runlog = RunLog(folder, resume_at=prep.resume.state.position if prep.resume is not None else None)
    runlog.write_profile(prep.resolved.profile.model_dump(mode="json"),
                         header=f"resolved profile of this run; sources: {' < '.join(prep.resolved.chain)}")
    return runlog


def args_to_save(args: TrainArgs) -> dict[str, Any]:
    """The run's own arguments for a later --resume; a profile file or data folder given by a relative
    path is stored absolute, so the resume works from any directory."""
    saved = {k: v for k, v in asdict(args).items() if k in RESUMED_FIELDS}
    profile, data = saved.get("profile"), saved.get("data")
    if isinstance(profile, str) and profile.endswith((".yaml", ".yml")) and Path(profile).is_file():
        saved["profile"] = str(Path(profile).resolve())
    if isinstance(data, str) and data not in BUILT_IN_DATA and ":" not in data and Path(data).is_dir():
        saved["data"] = str(Path(data).resolve())
    return saved


def measured_here(prep: Prepared) -> tuple[Measurement, ...]:
    """What was measured on this machine with this torch and model (tuning trials, bench speedups)."""
    from fasttrain.tuning.store import load_cache, machine_id, machine_measurements
    try:
        entries = load_cache()
    except Exception:
        return ()
    return tuple(machine_measurements(entries, machine_id(prep.report), prep.report.torch.version, prep.model_name))


def input_gain(prep: Prepared) -> str | None:
    """For the input-bound verdict: "" on prepared shards, else the factor `bench loader` measured on this
    folder (or that it is unmeasured); None for other data."""
    from fasttrain.datasets.measured import find_path_gains, gain_sentence
    from fasttrain.datasets.shards import ShardImages

    if prep.bundle.kind != "images":
        return None
    if isinstance(prep.bundle.train, ShardImages):
        return ""
    source = prep.bundle.source
    gains = find_path_gains(source, Path(prep.args.runs_dir)) or find_path_gains(source)  # bench's default runs/
    return gain_sentence(gains, source)
