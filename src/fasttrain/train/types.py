"""The types every part of train/ passes around: the command line as given, the job's shape, the prepared run.

No torch, and no other train module (the run state's types are named for annotations only): setup builds a
`Prepared`, the trial, the run and the views read it, and none of them needs another's module to name it.
Cheap to import (cli.py imports it through parallel/launch.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from fasttrain.core.errors import Problem, UserError

if TYPE_CHECKING:  # names for the annotations only: cli.py imports this module, which must stay cheap (no pydantic)
    from fasttrain.core.given import GivenInputs
    from fasttrain.datasets.bundle import DataBundle
    from fasttrain.hardware.report import HardwareReport
    from fasttrain.models.weights import WeightsMatch
    from fasttrain.plan import Plan
    from fasttrain.profiles.presets import Resolved
    from fasttrain.train.state.run_state import Resume

# --batch-size: a per-device batch, or "auto" (the largest that runs here, setup/batch_search.py).
BatchSize = int | Literal["auto"]
DEFAULT_RDZV_TIMEOUT_S = 300  # seconds the nodes of a multi-machine job get to meet (torchrun's own is 900)


def parse_batch_size(value: object) -> BatchSize:
    """`--batch-size` as typed (or as an older checkpoint saved it, a string): a positive integer or "auto".
    Anything else is a UserError naming the flag."""
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    try:
        n = int(value) if isinstance(value, (int, str)) and not isinstance(value, bool) else 0
    except ValueError:
        n = 0
    if n <= 0:
        raise UserError([Problem("--batch-size", "expected a positive integer or auto",
                                 "e.g. --batch-size 64 or --batch-size auto", value)])
    return n


@dataclass(frozen=True)
class LaunchSpec:
    """`--nproc-per-node N [--nnodes M --node-rank R --rdzv-endpoint HOST:PORT]`: this process starts the job."""

    nproc_per_node: int
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    rdzv_timeout_s: int = DEFAULT_RDZV_TIMEOUT_S


@dataclass(frozen=True)
class WorkerWorld:
    """Where this process stands in a torchrun job (all from the environment the agent set)."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int

    @property
    def nodes(self) -> int:
        return max(1, self.world_size // max(1, self.local_world_size))

    @property
    def is_main(self) -> bool:
        return self.rank == 0


@dataclass(frozen=True)
class TrainArgs:
    """A run's arguments as given, by `fasttrain train`'s flags or fasttrain.train()'s keywords (both through
    setup/args.train_args); setup/args.final_args makes the values a run trains with (a new TrainArgs)."""

    profile: str | None = None
    model: str | None = None
    data: str = "shapes"
    epochs: int | None = None
    sets: list[str] = field(default_factory=list)
    run_name: str | None = None
    runs_dir: Path = Path("runs")
    dry_run: bool = False
    pretrained: bool = False
    weights: str | None = None           # --weights FILE: start from these (models/weights.py)
    seed: int = 0
    quiet: bool = False
    verbose: bool = False                # --verbose: every note of the run's opening, not only what to know
    json: bool = False
    image_size: int | None = None
    num_classes: int | None = None
    save_every: int | None = None
    strict_data: bool = False
    resume: str | None = None            # a run folder, a checkpoint file, or "auto"
    on_nan: str = "stop"                 # "stop" | "skip"
    save_every_minutes: float | None = None
    batch_size: BatchSize | None = None  # None: the profile's loader.batch_size
    launch: LaunchSpec | None = None     # --nproc-per-node ...: this process starts the workers
    no_tune: bool = False                # --no-tune: no timed trial of the candidate settings (trial/tune.py)
    time_budget: float | None = None     # --time-budget, seconds for the whole command (setup/budget_args.py)
    deadline: str | None = None          # --deadline HH:MM
    max_cost: float | None = None        # --max-cost, US dollars at the profile's price
    no_last: bool = False                # --no-last: checkpoint.save_last false (no last.pt, no resume)
    explicit: set[str] = field(default_factory=set)  # fields given on the command line (win over a checkpoint's)
    inputs: GivenInputs | None = None    # a model / data handed to fasttrain.train() as objects (core/given.py)


@dataclass(frozen=True)
class Prepared:
    """A run checked and planned, before any training: what setup/prepare.py hands to the run and the views."""

    args: TrainArgs
    resolved: Resolved
    report: HardwareReport
    plan: Plan
    bundle: DataBundle
    model_name: str
    profile_ref: str
    profile_reason: str
    resume: Resume | None = None
    world: WorkerWorld | None = None      # set in a torchrun worker
    tuning: dict[str, Any] | None = None  # the cached tuning entry applied to the plan (trial/tune.py)
    init: WeightsMatch | None = None      # --weights matched to the model (None: --pretrained, scratch, a resume)

    @property
    def is_main(self) -> bool:
        """Rank 0, or a process torchrun did not start: the one that draws, logs and writes checkpoints."""
        return self.world is None or self.world.is_main

    @property
    def shows_progress(self) -> bool:
        """The main process of a run that is not --quiet."""
        return self.is_main and not self.args.quiet
