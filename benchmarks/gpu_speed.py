"""ResNet-50 training speed on the GPU at hand: naive settings vs a preset vs fasttrain's plan vs an expert loop.

    python benchmarks/gpu_speed.py --json gpu_speed.json        # ~5-8 minutes on an H100, most of it compiling

Rows (random-init timm ResNet-50, 224 px, 1000 classes, synthetic tensors made once on the GPU, SGD):
  naive      the field notes' naive settings: fp32, batch 16, NCHW, eager, no cudnn.benchmark (torch's defaults
             otherwise: fp32 matmuls, cuDNN TF32 on), for-each SGD
  a10g       the aws-a10g preset's speed settings and batch, read from fasttrain.profiles
  plan       fasttrain's own plan on this machine: the preset `fasttrain train` picks here (preset_match.best_preset)
             resolved by make_plan against this machine's report (precision fallbacks, TF32, fused optimizer)
  expert     a plain expert loop: bf16 autocast (fp16 + GradScaler before Ampere), channels_last, cudnn.benchmark,
             TF32, fused SGD, batch 256, torch.compile
  fasttrain  the plan through fasttrain's own step code: `fasttrain estimate --model resnet50 --profile <best>
             --measure --json` in a child process (its timing: warm-up steps, then synchronised)
  lightning  the expert settings in Lightning, when `lightning` is importable (else a note)
The in-process rows (naive, a10g, plan, expert) are timed in interleaved rounds after warm-up: each round runs
every row for ~the same number of images, torch.cuda.synchronize() before and after, nothing read back from the
GPU inside a round; the median round is reported. MFU = images/s x training FLOPs per image (fasttrain's cost
model) / the dtype's dense peak from src/fasttrain/data/gpus.csv. Peak memory = the row's resident tensors
(weights, optimizer state, its data) + torch.cuda.max_memory_allocated() over its rounds above what was
allocated before. Beside each row: fasttrain's estimate of the same settings on this GPU.
Targets: the tuned figure (the lower of `plan` and `fasttrain`) >= 4x `naive`, and >= 1.15x the best published
single-GPU ResNet-50 figure for this GPU (PUBLISHED below). Exit 0 met, 1 below a target, 2 no CUDA GPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import gc
import itertools
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NO_GPU = "gpu_speed: needs a CUDA GPU (torch.cuda.is_available() is False)"
MODEL = "resnet50"
NUM_CLASSES = 1000
TARGET_VS_NAIVE = 4.0
TARGET_VS_PUBLISHED = 1.15
# ResNet-50 training FLOPs per 224 px image when fasttrain's cost model is unavailable: 4.1 GMACs forward
# = 8.2 GFLOPs, backward ~2x forward.
FALLBACK_TRAIN_FLOPS = 3 * 8.2e9

# Best published single-GPU ResNet-50 training throughput, synthetic data, mixed precision; keyed by the
# gpus.csv name (fasttrain.hardware.gpus.find_gpu). Add a GPU only with its source.
PUBLISHED: dict[str, dict[str, Any]] = {
    "H100 SXM5 80GB": {
        "images_per_s": 2790,
        "what": "ResNet-50 v1.5 training, 1x H100 SXM, mixed precision (AMP), synthetic data",
        "source": "NVIDIA Data Center Deep Learning Product Performance, training tables "
                  "(https://developer.nvidia.com/deep-learning-performance-training-inference); the figure as the "
                  "project's brief quotes it: check it against the current page before publishing a ratio",
    },
}


@dataclass
class Setting:
    key: str
    label: str
    batch: int
    precision: str                 # fp32 | fp16-mixed | bf16-mixed
    channels_last: bool
    compile: bool
    cudnn_benchmark: bool
    tf32: bool                     # TF32 matmuls (float32_matmul_precision "high")
    cudnn_tf32: bool               # TF32 convolutions (torch's default is on)
    fused: bool
    compile_mode: str = "default"
    source: str = ""

    def speed_key(self) -> tuple:
        return (self.batch, self.precision, self.channels_last, self.compile, self.compile_mode,
                self.cudnn_benchmark, self.tf32, self.cudnn_tf32, self.fused)


@dataclass
class Row:
    key: str
    label: str
    settings: dict[str, Any]
    images_per_s: float | None = None
    rounds_images_per_s: list[float] = field(default_factory=list)
    mfu: float | None = None
    peak_memory_bytes: int | None = None
    forecast_images_per_s: float | None = None
    forecast_peak_memory_bytes: int | None = None
    forecast_mfu: float | None = None
    note: str = ""


# -- settings ----------------------------------------------------------------------------------------------
def setting_from_profile(key: str, label: str, profile: Any, plan: Any = None, source: str = "") -> Setting:
    speed = profile.speed
    if plan is not None:  # what the plan settled on for this machine
        return Setting(key, label, plan.batch_size, plan.precision, plan.channels_last, plan.compile,
                       plan.cudnn_benchmark, plan.tf32, plan.tf32, plan.fused_optimizer, plan.compile_mode, source)
    return Setting(key, label, profile.loader.batch_size, speed.precision, speed.channels_last, speed.compile,
                   speed.cudnn_benchmark, speed.tf32, speed.tf32, speed.fused_optimizer, speed.compile_mode, source)


def settings_for(report: Any, major: int) -> tuple[list[Setting], str]:
    from fasttrain.plan import make_plan
    from fasttrain.profiles import presets
    from fasttrain.profiles.preset_match import best_preset

    naive = Setting("naive", "naive (fp32, batch 16, NCHW, eager)", 16, "fp32", False, False, False, False, True,
                    False, source="field notes' naive settings; torch defaults otherwise")
    a10g = setting_from_profile("a10g", "aws-a10g preset", presets.resolve("aws-a10g", env={}).profile,
                                source="src/fasttrain/profiles/builtin/aws-a10g.yaml")
    best = best_preset(report)
    profile = presets.resolve(best, env={}).profile
    plan = setting_from_profile("plan", f"fasttrain plan ({best})", profile, make_plan(profile, report),
                                source=f"make_plan({best}, this machine)")
    expert = Setting("expert", "expert PyTorch loop", 256, "bf16-mixed" if major >= 8 else "fp16-mixed", True, True,
                     True, True, True, True, source="bf16/fp16 autocast, channels_last, cudnn.benchmark, TF32, "
                                                    "fused SGD, torch.compile")
    return [naive, a10g, plan, expert], best


# -- the plain loop ------------------------------------------------------------------------------------------
class PlainRun:
    """One setting's model, optimizer and synthetic batches on the GPU; step() never reads back from the GPU."""

    def __init__(self, s: Setting, image_size: int):
        import timm
        import torch

        self.s = s
        self.apply_flags()
        torch.manual_seed(0)
        fmt = torch.channels_last if s.channels_last else torch.contiguous_format
        model = timm.create_model(MODEL, pretrained=False, num_classes=NUM_CLASSES).cuda()
        self.model = model.to(memory_format=fmt).train()
        kernel = {"fused": True} if s.fused else {"foreach": True}
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5,
                                   **kernel)
        self.fn = torch.compile(self.model, mode=s.compile_mode) if s.compile else self.model
        self.dtype = {"fp16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}.get(s.precision)
        self.scaler = torch.amp.GradScaler("cuda") if s.precision == "fp16-mixed" else None
        g = torch.Generator(device="cuda").manual_seed(0)
        self.batches = [(torch.randn(s.batch, 3, image_size, image_size, device="cuda", generator=g)
                         .contiguous(memory_format=fmt),
                         torch.randint(0, NUM_CLASSES, (s.batch,), device="cuda", generator=g)) for _ in range(2)]
        self.i = 0
        self.resident = 0

    def apply_flags(self) -> None:
        """The backend flags are global: every row sets its own before it runs."""
        import torch
        torch.backends.cudnn.benchmark = self.s.cudnn_benchmark
        torch.backends.cudnn.allow_tf32 = self.s.cudnn_tf32
        torch.set_float32_matmul_precision("high" if self.s.tf32 else "highest")

    def step(self) -> None:
        import torch
        import torch.nn.functional as F

        x, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        with torch.autocast("cuda", dtype=self.dtype or torch.float32, enabled=self.dtype is not None):
            logits = self.fn(x)
        loss = F.cross_entropy(logits.float(), y)
        if self.scaler is not None:  # fused SGD takes the scaler's inf check on the device: no sync
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            loss.backward()
            self.opt.step()
        self.opt.zero_grad(set_to_none=True)

    def timed(self, steps: int) -> tuple[float, int]:
        """(seconds for `steps` steps, peak bytes allocated above the start). Synchronised only at the ends."""
        import torch
        self.apply_flags()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        for _ in range(steps):
            self.step()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        return seconds, int(torch.cuda.max_memory_allocated()) - before


def measure_plain(settings: list[Setting], image_size: int, warmup: int, rounds: int, images_per_round: int,
                  log: Any) -> dict[str, dict[str, Any]]:
    import torch

    runs: list[PlainRun] = []
    out: dict[str, dict[str, Any]] = {}
    try:
        for s in settings:
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            log(f"  building and warming up {s.key} (batch {s.batch}, {s.precision}, compile={s.compile}) ...")
            t0 = time.perf_counter()
            run = PlainRun(s, image_size)
            run.apply_flags()
            for _ in range(warmup):  # compilation, cudnn autotuning and allocator growth happen here
                run.step()
            torch.cuda.synchronize()
            run.resident = int(torch.cuda.memory_allocated()) - before  # weights, optimizer state, its batches
            log(f"    warm in {time.perf_counter() - t0:.0f} s")
            runs.append(run)
        for run in runs:  # one step each after the others changed the global flags: any recompile happens now
            run.apply_flags()
            run.step()
        torch.cuda.synchronize()
        steps = {run.s.key: max(3, round(images_per_round / run.s.batch)) for run in runs}
        rates: dict[str, list[float]] = {run.s.key: [] for run in runs}
        peaks: dict[str, int] = {run.s.key: 0 for run in runs}
        for r in range(rounds):
            order = runs if r % 2 == 0 else list(reversed(runs))  # no row always runs right after another
            for run in order:
                seconds, peak = run.timed(steps[run.s.key])
                rates[run.s.key].append(steps[run.s.key] * run.s.batch / seconds)
                peaks[run.s.key] = max(peaks[run.s.key], peak)
            log(f"  round {r + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in rates.items()))
        for run in runs:
            out[run.s.key] = {"images_per_s": statistics.median(rates[run.s.key]), "rounds": rates[run.s.key],
                              "peak_memory_bytes": run.resident + peaks[run.s.key]}
    finally:
        runs.clear()
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return out


# -- fasttrain's own step code, through the CLI -------------------------------------------------------------------
def measure_cli(best: str, image_size: int, steps: int, timeout: int, log: Any) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "fasttrain", "estimate", "--model", MODEL, "--profile", best, "--image-size",
           str(image_size), "--num-classes", str(NUM_CLASSES), "--measure", "--measure-steps", str(steps), "--json"]
    log("  " + " ".join(["fasttrain", *cmd[3:]]))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    data = json.loads(proc.stdout)
    m = data["measure"]
    return {"images_per_s": m["measured"]["images_per_s"], "peak_memory_bytes": m["measured"]["peak_memory_bytes"],
            "forecast_images_per_s": m["forecast"]["images_per_s"],
            "forecast_peak_memory_bytes": m["forecast"]["peak_memory_bytes"], "plan_notes": data.get("plan_notes")}


# -- Lightning ---------------------------------------------------------------------------------------------------
def measure_lightning(s: Setting, image_size: int, warmup: int, rounds: int, images_per_round: int) -> dict[str, Any]:
    try:
        import lightning as L
    except ImportError:
        return {"error": "lightning is not installed (pip install lightning): row skipped"}
    import timm
    import torch
    import torch.nn.functional as F

    steps = max(3, round(images_per_round / s.batch))
    fmt = torch.channels_last if s.channels_last else torch.contiguous_format
    g = torch.Generator(device="cuda").manual_seed(0)
    batches = [(torch.randn(s.batch, 3, image_size, image_size, device="cuda", generator=g)
                .contiguous(memory_format=fmt),
                torch.randint(0, NUM_CLASSES, (s.batch,), device="cuda", generator=g)) for _ in range(2)]
    total = warmup + rounds * steps

    class Batches(torch.utils.data.IterableDataset):
        def __iter__(self):
            for i in range(total):
                yield batches[i % 2]

    class Net(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = timm.create_model(MODEL, pretrained=False, num_classes=NUM_CLASSES).to(memory_format=fmt)
            self.run = torch.compile(self.net) if s.compile else self.net

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return F.cross_entropy(self.run(x).float(), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=5e-5,
                                   fused=s.fused)

    marks: list[float] = []
    peak: list[int] = []

    class Clock(L.Callback):
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx >= warmup and (batch_idx - warmup) % steps == 0:
                torch.cuda.synchronize()
                if batch_idx == warmup:
                    torch.cuda.reset_peak_memory_stats()
                marks.append(time.perf_counter())

        def on_train_end(self, trainer: Any, module: Any) -> None:
            torch.cuda.synchronize()
            marks.append(time.perf_counter())
            peak.append(int(torch.cuda.max_memory_allocated()))

    torch.backends.cudnn.allow_tf32 = s.cudnn_tf32
    torch.set_float32_matmul_precision("high" if s.tf32 else "highest")
    precision = {"bf16-mixed": "bf16-mixed", "fp16-mixed": "16-mixed"}.get(s.precision, "32-true")
    trainer = L.Trainer(accelerator="gpu", devices=1, precision=precision, max_steps=total, max_epochs=1,
                        benchmark=s.cudnn_benchmark, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[Clock()])
    try:
        trainer.fit(Net(), torch.utils.data.DataLoader(Batches(), batch_size=None))
    finally:
        del trainer
        batches.clear()
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    rates = [steps * s.batch / (b - a) for a, b in itertools.pairwise(marks)]
    if len(rates) != rounds:
        return {"error": f"expected {rounds} timed rounds, got {len(rates)}"}
    return {"images_per_s": statistics.median(rates), "rounds": rates, "peak_memory_bytes": peak[0] if peak else None,
            "note": f"Lightning {L.__version__}; rounds within one fit (not interleaved with the other rows)"}


# -- figures -------------------------------------------------------------------------------------------------
def train_flops_per_image(image_size: int, precision: str) -> tuple[float, str]:
    try:
        from fasttrain.estimate.cost import model_cost
        return float(model_cost(MODEL, image_size, num_classes=NUM_CLASSES, precision=precision)
                     .train_flops_per_sample), "fasttrain.estimate.cost"
    except Exception as exc:  # a figure for the table, never a failed benchmark
        why = f"3 x 8.2 GFLOPs ({type(exc).__name__} in the cost model)"
        return FALLBACK_TRAIN_FLOPS * (image_size / 224) ** 2, why


def forecast(s: Setting, image_size: int, report: Any) -> dict[str, Any]:
    """fasttrain's estimate of these settings on this GPU (forecast_for with force_local), or the reason not."""
    try:
        from fasttrain.estimate import gather
        from fasttrain.profiles import presets
        sets = [f"loader.batch_size={s.batch}", f"loader.image_size={image_size}", f"speed.precision={s.precision}",
                f"speed.channels_last={str(s.channels_last).lower()}", f"speed.compile={str(s.compile).lower()}",
                f"speed.tf32={str(s.tf32).lower()}", f"speed.cudnn_benchmark={str(s.cudnn_benchmark).lower()}",
                f"speed.fused_optimizer={str(s.fused).lower()}"]
        profile = presets.resolve("aws-a10g", sets=sets, env={}).profile
        req = gather.Request(model=MODEL, num_classes=NUM_CLASSES, dataset_size=gather.IMAGENET_TRAIN_SIZE,
                             dataset_size_source="ImageNet-1k", epochs_flag=None, image_size_flag=None, sets=[],
                             gpu=None, loader=None)
        fc, _target = gather.forecast_for(profile, req, report, force_local=True)
        if fc.device.get("kind") != "gpu":
            return {"error": f"the estimate has no spec for this GPU (it forecast for {fc.device.get('name')})"}
        return {"images_per_s": fc.speed.get("images_per_s_per_device"), "peak_memory_bytes": fc.memory.total,
                "mfu": fc.speed.get("mfu")}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(rows: list[Row]) -> str:
    head = f"{'row':<34} {'images/s':>9} {'MFU':>6} {'peak GiB':>9} | {'est img/s':>9} {'est GiB':>8} {'est MFU':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(f"{r.label[:34]:<34} {fmt(r.images_per_s, '9.0f')} {fmt(r.mfu and r.mfu * 100, '5.1f')}% "
                     f"{fmt(r.peak_memory_bytes and r.peak_memory_bytes / 2**30, '9.2f')} | "
                     f"{fmt(r.forecast_images_per_s, '9.0f')} "
                     f"{fmt(r.forecast_peak_memory_bytes and r.forecast_peak_memory_bytes / 2**30, '8.2f')} "
                     f"{fmt(r.forecast_mfu and r.forecast_mfu * 100, '6.1f')}%")
        if r.note:
            lines.append(f"{'':<4}{r.note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="ResNet-50 training speed on this GPU: naive vs preset vs fasttrain vs "
                                             "expert (docs/gpu.md).")
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the results here")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds (median reported)")
    ap.add_argument("--images-per-round", type=int, default=2560, help="images each row trains per round")
    ap.add_argument("--warmup-steps", type=int, default=5, help="untimed steps per row (compilation happens here)")
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--measure-steps", type=int, default=30, help="timed steps of the `fasttrain estimate` row")
    ap.add_argument("--no-cli-row", action="store_true", help="skip the fasttrain step-code row (a child process)")
    ap.add_argument("--no-lightning", action="store_true", help="skip the Lightning row")
    args = ap.parse_args(argv)

    try:
        import torch
    except ImportError:
        print("gpu_speed: needs a CUDA GPU (torch is not installed)", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print(NO_GPU, file=sys.stderr)
        return 2
    try:
        import fasttrain  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(REPO / "src"))

    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    from fasttrain.hardware.gpus import find_gpu
    from fasttrain.hardware.machine import probe

    started = time.perf_counter()
    name = torch.cuda.get_device_name(0)
    props = torch.cuda.get_device_properties(0)
    spec = find_gpu(name)
    log(f"gpu_speed: {name} ({props.total_memory / 2**30:.0f} GiB, cc {props.major}.{props.minor}), torch "
        f"{torch.__version__}; spec: {spec.name if spec else 'not in gpus.csv (no MFU, no forecast)'}")
    report = probe()
    settings, best = settings_for(report, props.major)
    plan_same = settings[2].speed_key() == settings[1].speed_key()
    measured_settings = [s for s in settings if not (s.key == "plan" and plan_same)]
    log("measuring the in-process rows" + (" (the plan's settings equal the aws-a10g preset's: measured once)"
                                           if plan_same else ""))
    plain = measure_plain(measured_settings, args.image_size, args.warmup_steps, args.rounds, args.images_per_round,
                          log)
    if plan_same:
        plain["plan"] = plain["a10g"]

    rows: list[Row] = []
    for s in settings:
        got = plain[s.key]
        row = Row(s.key, s.label, dataclasses.asdict(s), got["images_per_s"], got["rounds"],
                  peak_memory_bytes=got["peak_memory_bytes"], note=s.source)
        if s.key == "plan" and plan_same:
            row.note = f"same settings as the aws-a10g row ({best} is the preset fasttrain picks here)"
        rows.append(row)
    cli_row = None
    if not args.no_cli_row:
        log("measuring fasttrain's own step code (child process) ...")
        got = measure_cli(best, args.image_size, args.measure_steps, 600, log)
        plan_s = settings[2]
        cli_row = Row("fasttrain", f"fasttrain train step ({best})", dataclasses.asdict(plan_s),
                      got.get("images_per_s"), peak_memory_bytes=got.get("peak_memory_bytes"),
                      forecast_images_per_s=got.get("forecast_images_per_s"),
                      forecast_peak_memory_bytes=got.get("forecast_peak_memory_bytes"),
                      note=got.get("error") or "fasttrain estimate --measure: warm-up 2 steps, then timed "
                                               f"{args.measure_steps} (not interleaved)")
        rows.append(cli_row)
    if not args.no_lightning:
        log("measuring the Lightning row ...")
        expert = settings[3]
        got = measure_lightning(expert, args.image_size, args.warmup_steps, args.rounds, args.images_per_round)
        rows.append(Row("lightning", "Lightning, expert settings", dataclasses.asdict(expert),
                        got.get("images_per_s"), got.get("rounds", []), peak_memory_bytes=got.get("peak_memory_bytes"),
                        note=got.get("error") or got.get("note", "")))

    flops: dict[str, tuple[float, str]] = {}
    for row in rows:
        s = row.settings
        if row.key != "fasttrain":
            fc = forecast(Setting(**s), args.image_size, report)
            row.forecast_images_per_s = fc.get("images_per_s")
            row.forecast_peak_memory_bytes = fc.get("peak_memory_bytes")
            row.forecast_mfu = fc.get("mfu")
            if fc.get("error"):
                row.note = (row.note + "; " if row.note else "") + "estimate: " + fc["error"]
        if s["precision"] not in flops:
            flops[s["precision"]] = train_flops_per_image(args.image_size, s["precision"])
        peak = spec.peak_flops(s["precision"], s["tf32"]) if spec else None
        if row.images_per_s and peak:
            row.mfu = row.images_per_s * flops[s["precision"]][0] / peak

    by = {r.key: r for r in rows}
    candidates = [r for r in (by.get("plan"), by.get("fasttrain")) if r is not None and r.images_per_s]
    tuned = min(candidates, key=lambda r: r.images_per_s) if candidates else None  # type: ignore[arg-type,return-value]
    naive = by["naive"].images_per_s
    published = PUBLISHED.get(spec.name) if spec else None
    verdict: dict[str, Any] = {"tuned_row": tuned.key if tuned else None}
    failures = []
    if tuned is not None and naive:
        ratio = tuned.images_per_s / naive  # type: ignore[operator]
        verdict["vs_naive"] = {"ratio": ratio, "target": TARGET_VS_NAIVE, "met": ratio >= TARGET_VS_NAIVE}
        if ratio < TARGET_VS_NAIVE:
            failures.append(f"tuned / naive {ratio:.2f}x < {TARGET_VS_NAIVE}x")
    else:
        failures.append("no tuned figure to compare")
    if published is not None and tuned is not None:
        ratio = tuned.images_per_s / published["images_per_s"]  # type: ignore[operator]
        verdict["vs_published"] = {"ratio": ratio, "target": TARGET_VS_PUBLISHED, "met": ratio >= TARGET_VS_PUBLISHED,
                                   **published}
        if ratio < TARGET_VS_PUBLISHED:
            failures.append(f"tuned / published {ratio:.2f}x < {TARGET_VS_PUBLISHED}x")
    else:
        verdict["vs_published"] = {"met": None, "note": f"no published figure for {spec.name if spec else name} "
                                                        "in PUBLISHED: target not applied"}
    payload = {
        "device": name, "spec": spec.name if spec else None, "memory_bytes": props.total_memory,
        "compute_capability": f"{props.major}.{props.minor}", "torch": torch.__version__,
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "model": MODEL, "image_size": args.image_size, "best_preset": best,
        "train_flops_per_image": {k: {"flops": v[0], "source": v[1]} for k, v in flops.items()},
        "rounds": args.rounds, "images_per_round": args.images_per_round, "warmup_steps": args.warmup_steps,
        "rows": [dataclasses.asdict(r) for r in rows], "verdict": verdict, "failures": failures,
        "wall_s": time.perf_counter() - started,
    }
    print(f"ResNet-50 training, {args.image_size} px, synthetic data, {name} (torch {torch.__version__}); "
          f"median of {args.rounds} interleaved rounds")
    print(table(rows))
    if "vs_naive" in verdict:
        v = verdict["vs_naive"]
        print(f"tuned ({verdict['tuned_row']}) vs naive: {v['ratio']:.2f}x (target >= {TARGET_VS_NAIVE}x)")
    v = verdict["vs_published"]
    if v.get("met") is None:
        print(v["note"])
    else:
        print(f"tuned vs published {v['images_per_s']} images/s: {v['ratio']:.2f}x (target >= {TARGET_VS_PUBLISHED}x;"
              f" {v['what']})")
    print(f"wall time {payload['wall_s']:.0f} s")
    if args.json is not None:
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}")
    if failures:
        print("below target: " + "; ".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
