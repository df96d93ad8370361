"""Doctor rules about the host and the planned run: /dev/shm, loader RAM, workers, precision, compile,
the data disk, free space, environment, and whether the profile's machine is this one.

Pure: each takes a findings.Context and returns a Finding, or None when it does not apply here.
The loader arithmetic (workers x prefetch x batch bytes) is arithmetic.py's, the same as `profiles show`.
"""
from __future__ import annotations

import math

from fasttrain.core import arithmetic as ar
from fasttrain.core.format import fmt_bytes, plural
from fasttrain.doctor.findings import DISK_FREE_WARN_GIB, SHM_WARN_FRACTION, Context, Finding

VRAM_SLACK = 1.1  # presets write marketing GB; a "16 GB" T4 reports 15360 MiB = 15.0 GiB (1.07x less)


def _loader_words(c: Context) -> str:
    p = c.profile
    assert p is not None
    procs = f" x {p.world.gpus_per_node} processes" if p.world.gpus_per_node > 1 else ""
    return (f"{plural(p.loader.num_workers, 'worker')} x prefetch {p.loader.prefetch_factor or 2} "
            f"x batch {p.loader.batch_size} "
            f"at {p.loader.image_size}px{procs}")


def rule_shm(c: Context) -> Finding | None:
    """DataLoader workers pass batches through /dev/shm; 64 MB (Docker's default) kills them with 'bus error'."""
    p, m = c.profile, c.report.memory
    if p is None or m.shm_total_bytes is None:
        return None
    raw = ar.batch_bytes(p.loader.batch_size, p.loader.image_size)  # tensors as they sit in shm, no decode overhead
    need = ar.loader_shm_bytes(p.loader.num_workers, p.loader.prefetch_factor, raw, p.world.gpus_per_node)
    free = m.shm_free_bytes if m.shm_free_bytes is not None else m.shm_total_bytes
    size = f"/dev/shm {fmt_bytes(m.shm_total_bytes)} ({fmt_bytes(free)} free)"
    if need == 0:
        return Finding("shm", "ok", f"{size}; 0 workers: the loader does not use it")
    detail = (f"{_loader_words(c)} keep up to {p.loader.num_workers} x {p.loader.prefetch_factor or 2} + 1 batches of "
              f"{fmt_bytes(raw)} in shared memory = {fmt_bytes(need)}; {size}")
    fits = ar.workers_within_budget(p.loader.num_workers, p.loader.prefetch_factor, raw,
                                    int(free * SHM_WARN_FRACTION), p.world.gpus_per_node)
    suggest = max(math.ceil(need * 2 / ar.GIB), 1)
    fix = (f"start the container with --shm-size={suggest}g (docker) or a larger emptyDir medium: Memory "
           f"(Kubernetes); or --set loader.num_workers={fits}")
    if need > free:
        return Finding("shm", "fail", "/dev/shm too small for the planned DataLoader workers",
                       detail + ": workers will die with 'bus error' (\"insufficient shared memory\")", fix)
    if need > SHM_WARN_FRACTION * free:
        return Finding("shm", "warn", "/dev/shm nearly filled by the planned DataLoader workers", detail, fix)
    return Finding("shm", "ok", f"/dev/shm fits the loader ({fmt_bytes(need)} of {fmt_bytes(free)} free)", detail)


def rule_loader_ram(c: Context) -> Finding | None:
    """workers x prefetch x batch bytes against this machine's RAM (the 32 x 8 lesson of the A10G notes)."""
    p, m = c.profile, c.report.memory
    if p is None:
        return None
    used = p.loader_ram_bytes
    budget = ar.ram_budget_bytes(m.ram_total_bytes / ar.GIB, p.hardware.ram_budget_fraction)
    detail = (f"{_loader_words(c)}: {fmt_bytes(p.batch_bytes)} per batch -> {fmt_bytes(used)} of host RAM; budget "
              f"{fmt_bytes(budget)} = {p.hardware.ram_budget_fraction:.0%} of {fmt_bytes(m.ram_total_bytes)}, "
              f"{fmt_bytes(m.ram_available_bytes)} available now")
    fits = ar.workers_within_budget(p.loader.num_workers, p.loader.prefetch_factor, p.batch_bytes,
                                    min(budget, m.ram_available_bytes), p.world.gpus_per_node)
    fix = (f"--set loader.num_workers={fits} (or lower loader.prefetch_factor / loader.batch_size)" if fits
           else "lower loader.batch_size or loader.prefetch_factor: not even one worker fits")
    if p.loader.num_workers and used > m.ram_available_bytes:
        return Finding("loader-ram", "fail", "loader RAM over what this machine has free", detail +
                       ": the host runs out of memory (the OOM killer ends the run)", fix)
    if p.loader.num_workers and used > budget:
        return Finding("loader-ram", "warn", "loader RAM over the budget", detail +
                       f"; the plan will cap workers at {fits}", fix)
    return Finding("loader-ram", "ok", f"loader RAM {fmt_bytes(used)} within the {fmt_bytes(budget)} budget", detail)


def rule_workers_vs_cores(c: Context) -> Finding | None:
    p = c.profile
    if p is None:
        return None
    cores, workers = c.report.cores, c.workers
    advised = ar.default_workers(cores)
    per_process = max(advised // p.world.gpus_per_node, 0)
    detail = f"{plural(workers, 'DataLoader worker')} for {plural(cores, 'usable core')} ({c.report.cpu.model})"
    if workers > cores:
        return Finding("workers", "warn", "more DataLoader workers than CPU cores", detail +
                       "; they fight the main process for the CPU and the plan caps them at the core count",
                       f"--set loader.num_workers={per_process} (0.75 x {cores} cores)")
    return Finding("workers", "ok", f"{plural(workers, 'worker')} for {plural(cores, 'core')}", detail)


# A 1-minute load of half the cores or more is other work a run would share the CPU with (doctor itself has only
# just started, so the average is mostly others'): on 2 cores, load 1.47 left a run 35x slower (issue 25).
BUSY_LOAD_SHARE = 0.5


def rule_busy_cpu(c: Context) -> Finding | None:
    """Other work on the CPU now: every figure a run or a bench measures here is then the machine's, not its own."""
    load, cores = c.report.cpu.load_1m, c.report.cores
    if load is None:
        return None
    if load < BUSY_LOAD_SHARE * cores:
        return Finding("busy-cpu", "ok", f"CPU quiet: load {load:.2f} on {plural(cores, 'core')}")
    slower = (load + cores) / cores  # a run with a thread per core gets about cores / (load + cores) of them
    return Finding("busy-cpu", "warn", f"CPU busy: load {load:.2f} on {plural(cores, 'core')}",
                   f"other processes keep about {min(load, cores):.1f} cores busy: a run here gets about "
                   f"1/{slower:.1f} of the CPU, {slower:.1f}x slower or more (threads that wait on each other lose "
                   "more), and what train, bench and estimate --measure time is the machine's, not the run's",
                   "stop the other work (`top` shows it), or measure when the machine is quiet")


def rule_bf16(c: Context) -> Finding | None:
    p, r = c.profile, c.report
    if p is None or p.speed.precision != "bf16-mixed":
        return None
    gpu = r.training_gpu()
    if gpu is not None:
        if gpu.bf16_supported is False:
            return Finding("bf16", "warn", f"bf16 asked, but {gpu.name} has no bf16 (compute capability "
                           f"{gpu.compute_capability}, needs 8.0)", "the plan falls back to fp16-mixed with GradScaler",
                           "--set speed.precision=fp16-mixed")
        return Finding("bf16", "ok", f"bf16 supported on {gpu.name} (compute capability {gpu.compute_capability})")
    if r.torch.cpu_bf16_fast:
        return Finding("bf16", "ok", "bf16 autocast on the CPU: it has AVX512-BF16/AMX")
    return Finding("bf16", "warn", "bf16 asked on a CPU without AVX512-BF16/AMX",
                   "bf16 autocast on such a CPU is slower than fp32", "--set speed.precision=fp32")


def rule_compile(c: Context) -> Finding | None:
    p, t = c.profile, c.report.torch
    if p is None or not p.speed.compile:
        return None
    if t.compile_ok:
        return Finding("compile", "ok", "torch.compile can work here", t.compile_reason)
    return Finding("compile", "warn", "the profile asks torch.compile, which cannot work here",
                   f"{t.compile_reason}; the plan runs eager instead",
                   "install what is missing, or --set speed.compile=false")


def rule_data_disk(c: Context) -> Finding | None:
    """Can the disk under --data feed the images/s the run is expected to reach? A prepared set's files are
    shards of many images: its rate is MB/s over the bytes per image its manifest gives."""
    disk = next((d for d in c.report.disks if d.role == "data"), None)
    if disk is None:
        return None
    if not disk.sample_files or not disk.files_per_s:
        return Finding("data-disk", "warn", f"no readable files under {disk.path}",
                       "the read test found nothing to read", "check the --data path")
    avg = (disk.sample_bytes or 0) / disk.sample_files
    speed = (f"{disk.path}: {disk.files_per_s:,.0f} files/s, {disk.read_mb_per_s:,.1f} MB/s over {disk.sample_files} "
             f"files (average {avg / 1e3:,.0f} kB, one reader{', page cache dropped' if disk.cold_cache else ''})")
    rate = disk.files_per_s
    if c.data and c.data.get("prepared") and c.data.get("image_bytes"):
        rate = (disk.read_mb_per_s or 0) * 1e6 / c.data["image_bytes"]
        avg = c.data["image_bytes"]
        speed += f" = {rate:,.0f} images/s from shards of {avg / 1e3:,.0f} kB per image"
    target = c.target_images_per_s
    if not target:
        return Finding("data-disk", "ok", "data read speed measured (no throughput target to compare)", speed,
                       "pass --target-images-per-s N (or run `fasttrain estimate`) to check it feeds the GPU")
    readers = max(c.workers, 1)
    need = f"the run needs {target:,.0f} images/s ({target * avg / 1e6:,.1f} MB/s) [{c.target_source}]"
    if rate >= target:
        return Finding("data-disk", "ok", "the data disk keeps up", f"{speed}; {need}")
    fix = ("pack it into resized WebDataset shards with `fasttrain data prepare DIR --out DST` (few large files, "
           "small images; `fasttrain bench loader --data DIR` measures the gain), or copy it to local NVMe or "
           "/dev/shm; more loader.num_workers help on network storage")
    if rate * readers < target:
        return Finding("data-disk", "fail", "the data disk is too slow to feed the run",
                       f"{speed}; {need}: even {readers} reader{'s' if readers > 1 else ''} at this rate give "
                       f"{rate * readers:,.0f} images/s", fix)
    return Finding("data-disk", "warn", "one reader is slower than the run needs",
                   f"{speed}; {need}: {plural(readers, 'worker')} must read in parallel to keep up", fix)


def rule_input_path(c: Context) -> Finding | None:
    """How --data will be decoded, and what prepared shards were measured to buy on it (or how to measure it)."""
    if not c.data:
        return None
    if c.data.get("prepared"):
        return Finding("input-path", "ok", "--data is a prepared shard set (fasttrain data prepare)",
                       f"{c.data['images']:,} images in {plural(int(c.data['shards']), 'shard')}; "
                       f"{c.data['gain']}")
    decoding = str(c.data.get("decoding") or "")
    if c.data.get("decoded_once"):  # what shards would buy still matters where train decodes per epoch (a GPU)
        return Finding("input-path", "ok", "--data is an image folder that fits in RAM decoded",
                       f"{decoding}; for runs that decode per epoch: {c.data['gain']}")
    title = "--data is an image folder: every epoch decodes the original files"
    detail = f"{decoding}; {c.data['gain']}" if decoding else str(c.data["gain"])
    return Finding("input-path", "ok", title, detail, f"`fasttrain data prepare {c.data['path']} --out DST` packs it "
                   "once into resized shards; train with --data DST")


def rule_disk_free(c: Context) -> Finding | None:
    disk = next((d for d in c.report.disks if d.role == "cwd"), None)
    if disk is None or disk.free_bytes is None:
        return None
    detail = f"{disk.path}: {fmt_bytes(disk.free_bytes)} free of {fmt_bytes(disk.total_bytes)}"
    if disk.free_bytes < DISK_FREE_WARN_GIB * ar.GIB:
        return Finding("disk-free", "warn", "little free disk for runs/ and checkpoints", detail,
                       "free some space or run from a larger disk (runs/<name>/ holds checkpoints)")
    return Finding("disk-free", "ok", f"{fmt_bytes(disk.free_bytes)} free for runs/ and checkpoints", detail)


def rule_env(c: Context) -> Finding | None:
    env, cores = c.report.env, c.report.cores
    problems = []
    if env.get("CUDA_LAUNCH_BLOCKING", "0") not in ("", "0"):
        problems.append(("CUDA_LAUNCH_BLOCKING=1 serialises every kernel launch (a debugging switch)",
                         "unset CUDA_LAUNCH_BLOCKING"))
    threads = env.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > cores:
        problems.append((f"OMP_NUM_THREADS={threads} is above the {cores} usable cores: threads oversubscribe",
                         f"export OMP_NUM_THREADS={cores}"))
    if not problems:
        shown = ", ".join(f"{k}={v}" for k, v in env.items() if not k.startswith("FASTTRAIN_")) or "none set"
        return Finding("env", "ok", "environment", shown)
    return Finding("env", "warn", "environment variables slow training", "; ".join(p for p, _ in problems),
                   "; ".join(f for _, f in problems))


def rule_profile_machine(c: Context) -> Finding | None:
    """The profile's batch was sized for its GPU's memory; on a smaller GPU it runs out of memory."""
    p, r = c.profile, c.report
    gpu = r.training_gpu()
    if p is None or not p.hardware.vram_gb or gpu is None:
        return None
    have_gib = gpu.memory_total_bytes / ar.GIB
    detail = (f"{c.profile_label or p.name} was written for {p.hardware.gpu} with {p.hardware.vram_gb:g} GiB; "
              f"this is {gpu.name} with {have_gib:.1f} GiB")
    if have_gib * VRAM_SLACK < p.hardware.vram_gb:
        scaled = max(1, int(p.loader.batch_size * have_gib / p.hardware.vram_gb))
        return Finding("profile-machine", "warn", "this GPU has less memory than the profile assumes",
                       detail + f": batch {p.loader.batch_size} may not fit (CUDA out of memory)",
                       f"--set loader.batch_size={scaled}, or `fasttrain doctor --write-profile my.yaml`")
    return Finding("profile-machine", "ok", "the profile's GPU memory fits this GPU", detail)
