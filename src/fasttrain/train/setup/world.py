"""The world a training job is planned for: the processes this machine can serve, the share of data each one
gets, and, for a dry run on a machine without the GPUs a profile names, the profile's own machine instead.

Pure except for reading the GPU table (data/gpus.csv) for the profile's machine.
"""
from __future__ import annotations

from collections.abc import Callable

from fasttrain.core.errors import Problem, UserError
from fasttrain.hardware.report import HardwareReport
from fasttrain.plan import Plan
from fasttrain.profiles.schema import Profile


def check_world(plan: Plan, profile: Profile, report: HardwareReport, *, launched: bool) -> None:
    """A world the machine cannot serve stops here, before any process starts."""
    per_node = profile.world.gpus_per_node
    if plan.world_size > 1 and not launched:  # the effective batch and LR would assume devices that are not training
        nodes = f" --nnodes {profile.world.nodes} --node-rank R --rdzv-endpoint HOST:PORT" \
            if profile.world.nodes > 1 else ""
        raise UserError([Problem("world", f"the profile asks for {plan.world_size} processes ({profile.world.nodes} "
                                 f"node(s) x {per_node}), started by one command per machine",
                                 f"add --nproc-per-node {per_node}{nodes} (or run under torchrun), or set "
                                 "--set world.nodes=1 --set world.gpus_per_node=1", plan.world_size)])
    if plan.device == "cuda" and per_node > report.torch.device_count:
        raise UserError([Problem("--nproc-per-node", f"{per_node} processes per node, but torch sees "
                                 f"{report.torch.device_count} GPU(s) here: DDP runs one process per GPU",
                                 f"use --nproc-per-node {report.torch.device_count} or fewer", per_node)])
    if plan.device == "cpu" and per_node > report.cores:
        raise UserError([Problem("--nproc-per-node", f"{per_node} CPU processes on {report.cores} cores: each would "
                                 "get less than a core", f"use --nproc-per-node {report.cores} or fewer", per_node)])


def world_or_target(dry_run: bool, profile: Profile, report: HardwareReport, plan: Plan,
                    replan: Callable[[HardwareReport, str], Plan], *, launched: bool) -> tuple[HardwareReport, Plan]:
    """(report, plan) the run is made for. A world this machine cannot serve is refused, except in a dry run of a
    GPU profile on a machine with no CUDA GPU: that plans for the profile's own machine (its GPU, cores and RAM), so
    `--dry-run` of a documented 4-GPU line shows the 4-GPU plan here, and says why a real run here would stop."""
    try:
        check_world(plan, profile, report, launched=launched)
        return report, plan
    except UserError as refusal:
        target = profile_machine(profile) if dry_run and not report.torch.cuda_available else None
        if target is None:
            raise
        why = "; ".join(p.message for p in refusal.problems)
        gpu = target.gpus[0]
        note = (f"planned for the profile's machine ({profile.world.gpus_per_node} x {gpu.name}, "
                     f"{target.cores} cores, {profile.hardware.host_ram_gb:g} GB RAM), not this one: it has no CUDA "
                     f"GPU, and a real run here stops ({why})")
        plan = replan(target, note)
        check_world(plan, profile, target, launched=launched)
        return target, plan


def profile_machine(profile: Profile) -> HardwareReport | None:
    """The machine a GPU profile describes (hardware.gpu, vram_gb, cpu_cores, host_ram_gb), or None for a CPU one."""
    from fasttrain.estimate.gather import gpu_report
    from fasttrain.hardware import gpus
    spec = gpus.find_gpu(profile.hardware.gpu or "")
    if spec is None:
        return None
    usable = profile.hardware.vram_gb
    return gpu_report(profile, spec, int(usable * 1024 ** 3) if usable else (spec.memory_bytes or 0))


def no_full_batch(train_size: int, world_size: int) -> str:
    if world_size <= 1:
        return f"larger than the {train_size:,} training samples, so an epoch has no full batch"
    return (f"larger than each process's share of the {train_size:,} training samples ({train_size // world_size:,} "
            f"for each of {world_size} processes), so an epoch has no full batch")
