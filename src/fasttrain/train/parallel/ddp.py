"""Inside one worker of a torchrun job: the process group, DDP, and what the ranks must agree on.

- init(): NCCL on GPUs (one per local rank), gloo on CPUs; plus a gloo "control" group for small host-side
  agreements, so that agreeing on a stop never makes a CUDA stream wait (gloo works on CPU tensors).
- wrap(): DistributedDataParallel around the model after it is on its device and in channels_last, before
  torch.compile (PyTorch's recommended order: compile the DDP module, whose DDPOptimizer splits graphs at
  bucket boundaries so communication still overlaps the backward).
- StopVote: a SIGTERM reaches each rank at a different step (or only one rank). Every optimizer step each rank
  posts its flags (stop requested, periodic save due) in a non-blocking all-reduce (MAX) and reads the result
  one step later, so all ranks stop and save after the same step without a host sync on the hot path.
- sums(): metrics (loss sum, images, correct predictions) summed over ranks at epoch and validation ends.
Imported by train/run/execute.py and the Trainer only when the world size is above 1.
"""
from __future__ import annotations

import datetime
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from fasttrain.train.types import WorkerWorld

T = TypeVar("T")

# How long a collective may wait for the other ranks (a checkpoint save on rank 0 blocks the others at their
# next collective; a big one on a slow disk takes a minute or two). torch's own default is 10 min for NCCL.
COLLECTIVE_TIMEOUT = datetime.timedelta(minutes=30)


@dataclass
class DistContext:
    world: WorkerWorld
    backend: str
    device: torch.device
    control: Any = None                  # the gloo group for host-side agreements
    notes: list[str] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return self.world.rank

    @property
    def size(self) -> int:
        return self.world.world_size

    @property
    def is_main(self) -> bool:
        return self.world.rank == 0

    # -- model -------------------------------------------------------------------------------------
    def wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        from torch.nn.parallel import DistributedDataParallel as DDP
        # Gradients as views into the all-reduce buckets: no copy in and out of the buckets each step (that
        # copy was most of DDP's own cost in benchmarks/ddp_overhead.py) and one gradient-sized buffer less.
        if self.device.type == "cuda":
            return DDP(model, device_ids=[self.device.index], output_device=self.device.index,
                       gradient_as_bucket_view=True)
        return DDP(model, gradient_as_bucket_view=True)

    # -- reductions --------------------------------------------------------------------------------
    def sums(self, *values: float) -> list[float]:
        """Each value summed over all ranks (host floats through the control group: no device sync)."""
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.control)
        return t.tolist()

    def sum_counts(self, counts: torch.Tensor) -> torch.Tensor:
        """A host tensor of counts (int64, e.g. validation's confusion matrix) summed over all ranks, in place."""
        dist.all_reduce(counts, op=dist.ReduceOp.SUM, group=self.control)
        return counts

    def weighted_mean(self, values: torch.Tensor, weight: float) -> torch.Tensor | None:
        """The mean over all ranks of `values` (one flat float tensor on this rank's device), each rank's counted
        `weight` times; None when every weight is 0 (e.g. the batch-norm statistics validation re-estimates)."""
        total = self.sums(float(weight))[0]  # host floats: the control group
        if total <= 0:
            return None
        # The tensor goes through the default group, on its own device: on GPUs that is NCCL, queued on the
        # stream like a kernel (the gloo control group would need a copy to the host, a sync, and one back); on
        # CPUs it is gloo over the CPU tensor. No DDP collective is in flight here: the backward is done.
        share = values * (weight / total) if weight else torch.zeros_like(values)
        dist.all_reduce(share, op=dist.ReduceOp.SUM)
        return share

    def max(self, value: int) -> int:
        """The largest `value` of all ranks (e.g. a signal number one rank received, 0 for none)."""
        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.control)
        return int(t.item())

    def gather(self, obj: T) -> list[T]:
        """Every rank's `obj` (pickled), in rank order, on every rank."""
        out: list[Any] = [None] * self.size  # filled in rank order by all_gather_object
        dist.all_gather_object(out, obj, group=self.control)
        return out

    def broadcast(self, obj: T) -> T:
        """Rank 0's `obj` on every rank."""
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


class StopVote:
    """All ranks post the same number of integers after every optimizer step (signal number or 0, save due, then a
    time budget's ballot: loop/budget.Ballot.votes) and act on the result of the previous post, their MAX element by
    element: the agreed signal is the largest any rank received."""

    def __init__(self, ctx: DistContext):
        self.ctx = ctx
        self._posted: torch.Tensor | None = None
        self._work: Any = None

    def exchange(self, signal: int, due: bool) -> tuple[int, bool]:
        """Post this step's flags; -> the agreed (signal, due) of the previous post ((0, False) at first)."""
        agreed = self.post(signal, int(due))
        return (int(agreed[0]), bool(agreed[1])) if agreed is not None else (0, False)

    def post(self, *values: int) -> tuple[int, ...] | None:
        """Post this step's integers; -> the MAX over the ranks of the previous post (None: none in flight)."""
        agreed = self._collect()
        self._posted = torch.tensor(values, dtype=torch.int64)
        self._work = dist.all_reduce(self._posted, op=dist.ReduceOp.MAX, group=self.ctx.control, async_op=True)
        return agreed

    def drain(self) -> tuple[int, ...]:
        """Wait for the last post (end of a pass: no collective may be left in flight)."""
        return self._collect() or (0, 0)

    def _collect(self) -> tuple[int, ...] | None:
        if self._work is None or self._posted is None:
            return None
        self._work.wait()
        agreed = tuple(int(v) for v in self._posted.tolist())
        self._work, self._posted = None, None
        return agreed


def init(world: WorkerWorld, device_type: str) -> DistContext:
    """Join the job torchrun started (env:// rendezvous: MASTER_ADDR/PORT, RANK, WORLD_SIZE from the agent)."""
    if device_type == "cuda":
        device = torch.device("cuda", world.local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    kwargs: dict[str, Any] = {"backend": backend, "timeout": COLLECTIVE_TIMEOUT, "rank": world.rank,
                              "world_size": world.world_size}
    if device.type == "cuda":
        kwargs["device_id"] = device  # binds NCCL to this GPU at once (no guessing at the first collective)
    dist.init_process_group(**kwargs)
    # Its own gloo group even on CPUs: the vote's async all-reduce never queues behind DDP's gradient buckets.
    control = dist.new_group(backend="gloo", timeout=COLLECTIVE_TIMEOUT)
    ctx = DistContext(world, backend, device, control)
    ctx.notes.append(f"DDP: rank {world.rank} of {world.world_size} ({world.nodes} node(s) x "
                     f"{world.local_world_size} processes), backend {backend}")
    return ctx


@contextmanager
def joined(world: WorkerWorld | None, device_type: str) -> Iterator[DistContext | None]:
    """init() in a torchrun worker (a world of one included: the same DDP code path), always torn down;
    None (no process group) for a process torchrun did not start."""
    if world is None:
        yield None
        return
    ctx = init(world, device_type)
    try:
        yield ctx
    finally:
        ctx.close()

