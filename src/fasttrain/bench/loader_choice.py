"""What `bench loader`'s sweep says: the knee (where more workers stop helping), the setting recommended within
the RAM budget, whether it keeps up with the model, the result dict, and the recommendation as a profile file.
Pure: tested on recorded sweeps."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fasttrain.bench.loader_sweep import Point, Setting
from fasttrain.core.format import fmt_bytes

if TYPE_CHECKING:
    from fasttrain.plan import Plan

# The knee: the smallest worker count whose rate reaches this share of the best. Beyond it, each extra worker
# adds < 5% for another process's worth of RAM and CPU taken from the training process.
KNEE_FRACTION = 0.95
# A loader must deliver this much more than the model consumes to keep up: rates vary batch to batch, and a
# loader running at exactly the training rate stalls the step whenever a batch is slow.
KEEP_UP_HEADROOM = 1.1


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


def summary(points: list[Point], samples: list[dict[str, Any]], plan: Plan, choice: Point, why: str, knee: Point,
            training: dict[str, Any], **context: str | int | None) -> dict[str, Any]:
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


def profile_note(data: str, batch_size: int, image_size: int, choice: Point, why: str) -> str:
    """The comment atop a profile `bench loader --write-profile` writes: what was measured, and why this setting."""
    return (f"written by `fasttrain bench loader` ({data}, batch {batch_size}, {image_size} px): "
            f"{choice.images_per_s:.0f} img/s\n{why}")


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
