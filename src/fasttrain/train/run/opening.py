"""What a run opens before its first step: the loaders (with a sampler that resumes mid-epoch), the run folder
and its log."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from fasttrain.train.types import Prepared

if TYPE_CHECKING:
    from fasttrain.datasets.build import SyntheticBatches
    from fasttrain.datasets.loaders import DecodedLoader, Loader
    from fasttrain.datasets.sampler import EpochSampler
    from fasttrain.train.parallel.ddp import DistContext
    from fasttrain.train.run.runlog import RunLog

    TrainLoader = Loader | DecodedLoader | SyntheticBatches


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
