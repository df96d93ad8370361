"""`bench loader`: images/s the input pipeline delivers and host RAM it holds, per num_workers x prefetch_factor.

The field notes found their starved GPU by watching htop and guessed "more workers 1.5x". This sweeps the
worker count (0 up to the cores, and one step beyond to show where more stop helping) and prefetch_factor
with the profile's batch, image size and augmentation, through the same loaders `train` builds
(datasets.build_datasets + loaders.build_loaders). Settings run in interleaved rounds (medians of images/s;
the machine is noisy). RAM: RSS summed over the main process and its workers, sampled on a thread while
batches flow, and PSS summed once at the end of the timed window. Workers are forked copies sharing the
parent's pages, so the RSS sum counts the shared libraries once per worker; PSS splits shared pages between the processes that map them, so the PSS
sum is what the machine really gives up, and it is what the RAM budget is checked against.

Pure parts (worker counts, knee, recommendation, keeping up, profile YAML) are tested on recorded sweeps.
"""
from __future__ import annotations

import dataclasses
import statistics
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fasttrain.bench.rounds import rotated
from fasttrain.core.format import fmt_bytes, plural

# The knee: the smallest worker count whose rate reaches this share of the best. Beyond it, each extra worker
# adds < 5% for another process's worth of RAM and CPU taken from the training process.
KNEE_FRACTION = 0.95
PREFETCH_FACTORS = (2, 4)
# A loader must deliver this much more than the model consumes to keep up: rates vary batch to batch, and a
# loader running at exactly the training rate stalls the step whenever a batch is slow.
KEEP_UP_HEADROOM = 1.1
RAM_SAMPLE_S = 0.1


@dataclass
class Setting:
    workers: int
    prefetch: int | None      # None with 0 workers: the main process loads one batch at a time

    @property
    def label(self) -> str:
        return plural(self.workers, "worker") + (f", prefetch {self.prefetch}" if self.prefetch else "")


@dataclass
class Point:
    """One setting's measurements (medians over rounds for the rate, the maximum for RAM)."""

    workers: int
    prefetch: int | None
    images_per_s: float
    ram_bytes: int            # PSS sum, main + workers, above the main process before the loader started
    rss_bytes: int            # RSS sum, main + workers (over-counts shared pages; shown for comparison)
    startup_s: float          # until the first batch arrived (worker start-up)
    rounds: int = 1
    images_per_s_low: float | None = None    # slowest and fastest round: the noise the median hides
    images_per_s_high: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# -- pure ----------------------------------------------------------------------------------------------------
def worker_counts(cores: int, max_workers: int | None = None) -> list[int]:
    """0, 1, 2, 3, 4, then steps of ~1.5x up to the cores, the cores, and one step past them (where more workers
    should stop helping). 2 cores -> [0, 1, 2, 3]; 16 -> [0, 1, 2, 3, 4, 6, 9, 13, 16, 24]."""
    top = max_workers if max_workers is not None else cores + max(1, cores // 2)
    counts = {w for w in range(0, min(top, 4) + 1)}
    w = 4
    while w < min(top, cores):
        w = max(w + 1, round(w * 1.5))
        counts.add(min(w, cores))
    if cores <= top:
        counts.add(cores)
    counts.add(top)
    return sorted(c for c in counts if c <= top)


def sweep_settings(counts: list[int], prefetch_factors: tuple[int, ...] = PREFETCH_FACTORS) -> list[Setting]:
    out: list[Setting] = []
    for w in counts:
        if w == 0:
            out.append(Setting(0, None))
        else:
            out.extend(Setting(w, p) for p in prefetch_factors)
    return out


def combine_rounds(samples: list[dict[str, Any]]) -> list[Point]:
    """samples: one dict per (round, setting) with workers, prefetch, images_per_s, ram_bytes, rss_bytes,
    startup_s -> one Point per setting: median rate and start-up, maximum RAM."""
    groups: dict[tuple[int, int | None], list[dict[str, Any]]] = {}
    for s in samples:
        groups.setdefault((s["workers"], s["prefetch"]), []).append(s)
    points = []
    for (w, p), rows in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        rates = [r["images_per_s"] for r in rows]
        points.append(Point(w, p, statistics.median(rates), max(r["ram_bytes"] for r in rows),
                            max(r["rss_bytes"] for r in rows), statistics.median(r["startup_s"] for r in rows),
                            len(rows), min(rates), max(rates)))
    return points


def best_per_workers(points: list[Point]) -> dict[int, Point]:
    best: dict[int, Point] = {}
    for p in points:
        if p.workers not in best or p.images_per_s > best[p.workers].images_per_s:
            best[p.workers] = p
    return best


def find_knee(points: list[Point], fraction: float = KNEE_FRACTION) -> Point:
    """The smallest worker count reaching `fraction` of the best rate (its best prefetch)."""
    if not points:
        raise ValueError("no measurements")
    top = max(p.images_per_s for p in points)
    per = best_per_workers(points)
    return next(per[w] for w in sorted(per) if per[w].images_per_s >= fraction * top)


def recommend(points: list[Point], ram_budget_bytes: int, fraction: float = KNEE_FRACTION) -> tuple[Point, str]:
    """The knee among settings whose measured RAM fits the budget; within the chosen worker count the smallest
    prefetch reaching `fraction` of that count's best (more prefetch only holds more batches in RAM).
    Worker processes are preferred over 0 workers whenever one fits: their loading overlaps the training step.
    -> (setting, reason in words)."""
    fitting = [p for p in points if p.ram_bytes <= ram_budget_bytes]
    # 0 workers load in the training process itself: no overlap with the step, whatever its rate alone.
    overlapping = [p for p in fitting if p.workers > 0]
    fitting = overlapping or fitting
    if not fitting:
        least = min(points, key=lambda p: p.ram_bytes)
        return least, (f"no setting fits the {fmt_bytes(ram_budget_bytes)} RAM budget; the leanest "
                       f"({Setting(least.workers, least.prefetch).label}) used {fmt_bytes(least.ram_bytes)}")
    knee = find_knee(fitting, fraction)
    same = [p for p in fitting if p.workers == knee.workers and p.images_per_s >= fraction * knee.images_per_s]
    choice = min(same, key=lambda p: p.prefetch or 0)
    top = max(p.images_per_s for p in fitting)
    dropped = sum(1 for p in points if p.ram_bytes > ram_budget_bytes)
    reason = (f"fewest workers reaching {fraction:.0%} of the best rate ({top:.0f} img/s)"
              + (f"; {dropped} settings over the {fmt_bytes(ram_budget_bytes)} RAM budget left out" if dropped else
                 f"; RAM {fmt_bytes(choice.ram_bytes)} within the {fmt_bytes(ram_budget_bytes)} budget"))
    return choice, reason


def keeps_up(loader_rate: float, train_rate: float | None, cpu_only: bool,
             source: str = "measured here") -> dict[str, Any]:
    """Does the loader feed the model? -> {keeps_up: bool | None, ratio, train_images_per_s, source, message}.
    `source` says where the training rate comes from: measured here, or estimate's forecast for the profile's
    GPU when this machine has none."""
    if not train_rate:
        return {"keeps_up": None, "ratio": None, "train_images_per_s": None, "source": None,
                "message": "training rate not measured (--model none)"}
    ratio = loader_rate / train_rate
    ok = ratio >= KEEP_UP_HEADROOM
    if ok:
        msg = (f"keeps up: the loader delivers {ratio:.1f}x what the model trains on ({train_rate:.0f} img/s, "
               f"{source})")
    else:
        msg = (f"input-bound: the loader delivers {loader_rate:.0f} img/s, the model could train on "
               f"{train_rate:.0f} img/s ({source}; {ratio:.2f}x); use more cores, smaller or pre-decoded images, "
               "or lighter augmentation")
    if cpu_only and source == "measured here":
        msg += ("; on a CPU-only machine the workers and the training share the same cores, so measured apart "
                "both rates are optimistic")
    return {"keeps_up": ok, "ratio": ratio, "train_images_per_s": train_rate, "source": source, "message": msg}


def summary(points: list[Point], samples: list[dict[str, Any]], plan: Any, choice: Point, why: str, knee: Point,
            training: dict[str, Any], **context: Any) -> dict[str, Any]:
    """The `bench loader` result: every point and round, the knee, the recommendation and its reason, the best
    setting, the gain over loading in the main process, and whether it feeds the model. `context` (data, profile,
    cores, rounds, batches, model, batch_message) is recorded as given."""
    best = max(points, key=lambda p: p.images_per_s)
    zero = next((p for p in points if p.workers == 0), None)
    return {
        "data": context["data"], "profile": context["profile"], "batch_size": plan.batch_size,
        "image_size": plan.image_size, "cores": context["cores"], "rounds": context["rounds"],
        "batches": context["batches"], "ram_budget_bytes": plan.ram_budget_bytes,
        "points": [p.to_dict() for p in points], "samples": samples,
        "knee": knee.to_dict(), "recommended": {**choice.to_dict(), "reason": why},
        "best": best.to_dict(), "speedup_over_0_workers": (choice.images_per_s / zero.images_per_s) if zero else None,
        "training": training, "model": context["model"], "batch_message": context["batch_message"],
        "profile_written": None,
    }


def workers_measurement(points: list[Point], choice: Point, planned: int, today: str) -> Any:
    """What `bench loader` leaves in the measurement cache (tuning/store.py) for doctor and train's plan: the
    recommended worker count and its rate over the count the plan would have used (the nearest one measured). Pure."""
    from fasttrain.tuning.store import Measurement

    per = best_per_workers(points)
    base = per[min(per, key=lambda w: (abs(w - planned), w))]
    return Measurement("workers", choice.workers, round(choice.images_per_s / max(base.images_per_s, 1e-9), 2),
                       "bench loader", today, f"vs {plural(base.workers, 'worker')}, the plan's rule")


def forecast_rate(profile: Any, model_name: str, *, num_classes: int, dataset_size: int) -> tuple[float, str] | None:
    """estimate's forecast of training images/s on the GPU the profile names, for when this machine has no GPU
    (the loader measured here must keep up with *that* GPU). None when estimate cannot forecast it."""
    if not profile.hardware.gpu:
        return None
    try:
        from fasttrain.estimate import gather as eg

        req = eg.Request(model_name, num_classes, dataset_size, "bench loader", None, None, [], None, None)
        fc, _ = eg.forecast_for(profile, req, None)
    except Exception:  # noqa: BLE001 - a forecast is optional: fall back to measuring here
        return None
    rate = fc.speed.get("images_per_s")
    if not rate:
        return None
    return float(rate), f"estimate's forecast for {fc.device.get('name') or profile.hardware.gpu}"


def profile_yaml(extends: str, choice: Point, note: str) -> str:
    """A profile file that extends the one benchmarked and sets the chosen loader keys (valid under
    profiles/rules.py: 0 workers means no prefetch and no persistent workers)."""
    lines = [f"# {line}" for line in note.splitlines()]
    lines += [f"extends: {extends}", "loader:", f"  num_workers: {choice.workers}"]
    if choice.workers > 0:
        lines.append(f"  prefetch_factor: {choice.prefetch or 2}")
    else:
        lines += ["  prefetch_factor: null", "  persistent_workers: false"]
    return "\n".join(lines) + "\n"


# -- measurement ---------------------------------------------------------------------------------------------
class RamSampler:
    """Peak RSS summed over this process and its children, sampled on a thread every RAM_SAMPLE_S (cheap:
    /proc/<pid>/statm). PSS needs the kernel to walk every mapping (~20 ms per process with torch loaded), so
    `pss_now()` is read once, after the timed window, while the workers still hold their prefetched batches."""

    def __init__(self, interval_s: float = RAM_SAMPLE_S):
        import psutil

        self.proc = psutil.Process()
        self.interval_s = interval_s
        self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _procs(self) -> list[Any]:
        try:
            return [self.proc, *self.proc.children(recursive=True)]
        except Exception:  # noqa: BLE001 - the process table changes while workers start and stop
            return [self.proc]

    def sample(self) -> int:
        rss = 0
        for p in self._procs():
            try:
                rss += p.memory_info().rss
            except Exception:  # noqa: BLE001 - a worker may exit between listing and reading
                pass
        self.peak_rss = max(self.peak_rss, rss)
        return rss

    def pss_now(self) -> int:
        return sum(pss_of(p) for p in self._procs())

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RamSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def pss_of(proc: Any) -> int:
    """Proportional set size in bytes (shared pages split between the processes mapping them); RSS where the
    kernel has no smaps_rollup."""
    try:
        with open(f"/proc/{proc.pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(proc.memory_info().rss)
    except Exception:  # noqa: BLE001
        return 0


def measure_setting(bundle: Any, plan: Any, setting: Setting, *, batches: int, max_seconds: float,
                    seed: int = 0) -> dict[str, Any]:
    """Start a fresh train loader with this setting, wait for the first batch (start-up), then time up to
    `batches` more (or `max_seconds`). Non-persistent workers: each setting starts and stops its own."""
    import psutil

    from fasttrain.datasets.loaders import build_loaders

    p = dataclasses.replace(plan, workers=setting.workers, prefetch_factor=setting.prefetch,
                            persistent_workers=False)
    idle_pss = pss_of(psutil.Process())
    images = 0
    with warnings.catch_warnings(), RamSampler() as ram:
        # torch warns when workers outnumber the cores; the sweep goes one step past them on purpose
        warnings.filterwarnings("ignore", message=".*worker processes in total.*")
        train, _ = build_loaders(bundle, p, seed=seed)
        started = time.perf_counter()
        it = iter(train)
        next(it)
        first = time.perf_counter()
        timed = 0
        for batch in it:
            images += int(batch[1].shape[0])
            timed += 1
            if timed >= batches or time.perf_counter() - first > max_seconds:
                break
        elapsed = time.perf_counter() - first
        loaded_pss = ram.pss_now()  # workers alive, prefetch queues full: the loader's steady-state RAM
        del it  # shuts the workers down
    return {"workers": setting.workers, "prefetch": setting.prefetch, "images_per_s": images / max(elapsed, 1e-9),
            "ram_bytes": max(0, loaded_pss - idle_pss), "rss_bytes": ram.peak_rss, "startup_s": first - started,
            "batches": timed}


def sweep(bundle: Any, plan: Any, settings: list[Setting], *, rounds: int, batches: int, max_seconds: float,
          progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Every setting once per round; the order rotates each round."""
    samples = []
    for r in range(rounds):
        for s in rotated(settings, r, step=max(1, len(settings) // max(1, rounds))):
            row = measure_setting(bundle, plan, s, batches=batches, max_seconds=max_seconds)
            row["round"] = r
            samples.append(row)
            if progress is not None:
                progress(f"round {r + 1}/{rounds} {s.label}: {row['images_per_s']:.0f} img/s, "
                         f"RAM {fmt_bytes(row['ram_bytes'])}")
    return samples


def training_rate(plan: Any, model_name: str, *, image_size: int, num_classes: int, steps: int = 3,
                  warmup_steps: int = 1) -> float:
    """Images/s the model trains at on inputs already on the device (the same step code as `train`)."""
    from fasttrain.models.registry import create_model
    from fasttrain.train.loop.synthetic import run_synthetic_steps

    model = create_model(model_name, num_classes)
    return run_synthetic_steps(plan, model, image_size=image_size, num_classes=num_classes, steps=steps,
                               warmup_steps=warmup_steps)["images_per_s"]


def write_profile(path: Path, extends: str, choice: Point, note: str) -> None:
    """Write the profile and check it resolves (presets.resolve) before leaving it on disk."""
    from fasttrain.profiles import presets

    path = Path(path)
    if Path(extends).suffix in (".yaml", ".yml") and not Path(extends).is_absolute():
        extends = str(Path(extends).resolve())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(profile_yaml(extends, choice, note))
    try:
        presets.resolve(str(path), env={})
    except Exception:
        path.unlink(missing_ok=True)
        raise
