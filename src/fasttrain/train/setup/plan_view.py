"""What `train --dry-run` shows (and `--json` prints), and the notes a run's dashboard opens with: the plan
in words, where the profile came from, the data and the model, and what the tuning trial found or why none runs.
Rendering only: every figure comes from the Plan and the prepared run."""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fasttrain.core.format import short_name
from fasttrain.train.types import Prepared

if TYPE_CHECKING:
    import torch


def plan_view(prep: Prepared) -> dict[str, Any]:
    """What --dry-run shows (and --json prints): the plan, where the profile came from, data and model."""
    p = prep.plan
    return {
        "profile": prep.profile_ref, "profile_reason": prep.profile_reason, "sources": prep.resolved.chain,
        "model": prep.model_name, "weights": weights_words(prep),
        "data": {"spec": prep.args.data, "kind": prep.bundle.kind, "source": str(prep.bundle.source),
                 "num_classes": prep.bundle.num_classes, "train_size": prep.bundle.train_size,
                 "val_size": prep.bundle.val_size},
        "classes": {"count": prep.bundle.num_classes, "names": list(prep.bundle.class_names)},
        "epochs": prep.resolved.profile.optim.epochs,
        "optimizer": prep.resolved.profile.optim.optimizer, "schedule": prep.resolved.profile.optim.schedule,
        "base_batch": prep.resolved.profile.optim.base_batch,
        "recipe": recipe_words(prep),
        "plan": p.to_dict(),
        "tuning": _tuning_view(prep),
        "checkpoints": checkpoints_view(prep),
        "notes": plan_notes(prep),
    }


def checkpoints_view(prep: Prepared, model: torch.nn.Module | None = None) -> dict[str, Any] | None:
    """What the run's checkpoint files will weigh (train/state/checkpoint_size.py), with its line: counted on
    `model` (the run's own, once it is built: a builder is called once per run), else on the meta device; None when
    the model cannot be counted (the forecast is advice: the run itself goes on)."""
    from fasttrain.train.state.checkpoint_size import for_run, words
    try:
        told = for_run(prep, model)
    except Exception:
        return None
    return {**told.to_dict(), "line": words(told)}


def weights_words(prep: Prepared) -> str | None:
    """Where the run's starting weights come from, or None from scratch: --weights' match in words, the
    --pretrained source (the hub id and its cache), or the file of a resumed run's start."""
    if prep.init is not None:
        return prep.init.line()
    if prep.args.weights:
        return f"{prep.args.weights} (loaded when the run began; the checkpoint holds them since)"
    if prep.args.pretrained:
        from fasttrain.models.registry import pretrained_source
        return f"pretrained: {pretrained_source(prep.model_name)}"
    return None


def classes_text(count: int, names: Sequence[str], width: int = 80) -> str:
    """`10 classes: T-shirt, Trouser, Pullover, ... Ankle boot` in at most `width` characters: every name when all
    fit, else the first ones that fit and the last; the count alone without names (synthetic data). Pure."""
    from fasttrain.core.format import plural
    head = plural(count, "class", "classes")
    if not names:
        return head
    whole = f"{head}: " + ", ".join(short_name(n) for n in names[:width])  # more than `width` names never fit
    if len(names) <= width and len(whole) <= width:
        return whole
    last = short_name(names[-1])
    first: list[str] = []
    for name in names[:-1]:
        if len(f"{head}: " + ", ".join([*first, short_name(name)]) + f", ... {last}") > width:
            break
        first.append(short_name(name))
    if first:
        return f"{head}: " + ", ".join(first) + f", ... {last}"
    return head if len(f"{head}: ... {last}") > width else f"{head}: ... {last}"


def recipe_words(prep: Prepared) -> str:
    """The recipe beside the optimizer and LR, in the words of the settings that set it: what a user reads to know
    how the run trains and validates (the flip and crop checks' decisions included)."""
    optim, augment = prep.resolved.profile.optim, prep.resolved.profile.augment
    low, high = augment.random_resized_crop_scale
    decay = f"weight decay {optim.weight_decay:g} (not on norms, biases)" if optim.weight_decay else "no weight decay"
    parts = [f"warm-up {optim.warmup_epochs:g} epoch", decay,
             f"label smoothing {optim.label_smoothing:g}", f"EMA {optim.ema_decay:g}" if optim.ema_decay else "no EMA",
             f"crop {low:g}-{high:g} of the area", f"flips {augment.hflip:g}" if augment.hflip > 0 else "no flips",
             ("validation with mirror images" if augment.validates_mirrored else "validation as is")
             + (" (whole image)" if augment.val_crop_pct >= 1 else f" (centre crop {augment.val_crop_pct:g})"),
             f"batch norms re-estimated on {optim.precise_bn_images} training images before it"
             if optim.precise_bn_images else "batch norms' running statistics"]
    return ", ".join(parts)


def plan_notes(prep: Prepared) -> list[str]:
    """The profile's notes, then the plan's: what the run's dashboard opens with (without the rest of plan_view,
    whose tuning line would compute the forecast a second time)."""
    return [n.line() for n in prep.resolved.notes] + list(prep.plan.notes)


# Notes that say how the run works rather than something the user must act on or know before the first step: shown
# with --verbose, and kept in summary.json ("plan_notes", "notes") either way.
# The plan's tuning note: the run's own tuning line says it (execute.py). The checkpoints' sizes: --dry-run's line.
DETAIL_PREFIXES = ("input: ", "CPU compute threads: ", "CPU allocator: ", "CPU convolutions: ", "pin_memory off",
                   "TF32 off", "tuning: ", "checkpoints: ", "augment: validation sees the whole image")


def must_know(note: str) -> bool:
    """Whether a note of the run's opening is shown without --verbose. Pure."""
    return not note.removeprefix("note: ").startswith(DETAIL_PREFIXES)


def opening_notes(prep: Prepared, model: torch.nn.Module | None = None) -> list[str]:
    """The notes the dashboard opens with: the profile's notes on values the user chose (one about the preset's own
    choice, e.g. bf16 on a CPU, is the preset's business: the plan's notes say what it became), then the plan's,
    then what the checkpoints will weigh (counted on `model`, the run's); without --verbose only those must_know()
    keeps."""
    notes = [n.line() for n in prep.resolved.notes
             if prep.args.verbose or not _presets_own(prep, n.where.split(" ")[0].rstrip(":"))]
    notes += list(prep.plan.notes)
    if prep.is_main and (told := checkpoints_view(prep, model)) is not None:  # said with --verbose; no last.pt: always
        notes.append(told["line"] if "last.pt" not in told["files"] else f"checkpoints: {told['line']}")
    return notes if prep.args.verbose else [n for n in notes if must_know(n)]


def _presets_own(prep: Prepared, key: str) -> bool:
    """Whether `key`'s value is a preset's (or the default), also through a file that `extends:` the preset."""
    from fasttrain.profiles.files import preset_names
    source = prep.resolved.provenance.get(key, "default")
    return source.startswith(("preset", "default")) or (source.startswith("parent ") and
                                                         source.removeprefix("parent ") in preset_names())


def _tuning_view(prep: Prepared) -> dict[str, Any]:
    """What the tuning trial found (cached), or why none will run, for --dry-run: the run's own decision
    (tune.no_trial_reason, with the forecast's step time the run would give it)."""
    from fasttrain.train.trial.choice import tuning_line
    from fasttrain.train.trial.tune import forecast_for_run, no_trial_reason

    if prep.tuning:
        return {"cached": True, **prep.tuning, "line": tuning_line({"cached": True, **prep.tuning})}
    forecast = forecast_for_run(prep) if not prep.args.no_tune and prep.bundle.kind != "custom" else None
    reason = no_trial_reason(prep, (forecast or {}).get("step_time_s"))
    findings = {"skipped": reason} if reason else None
    return {**(findings or {}), "line": tuning_line(findings)}


def _prefetch(p: dict[str, Any]) -> str:
    """The loader's prefetch as the plan shows it: the factor, none without workers, else torch's default 2."""
    if p["prefetch_factor"] is not None:
        return str(p["prefetch_factor"])
    return "none (no workers)" if not p["workers"] else "auto (2)"


def _chosen(value: Any, requested: Any, reason: str) -> str:
    """`4 (as asked)`, `bf16-mixed (as asked; why)` when the plan kept it for a reason of its own, or
    `2 (asked 4: only 2 cores)` when the plan changed what the profile asked for."""
    if value == requested:
        return f"{value} (as asked)" if reason in ("", "asked") else f"{value} (as asked; {reason})"
    return f"{value} (asked {requested}: {reason})"


def plan_lines(view: dict[str, Any]) -> list[str]:
    from fasttrain.core.format import plural

    p = view["plan"]
    d = view["data"]
    base_batch = view.get("base_batch")
    lr = (f"{view['optimizer']} {p['base_lr']:g} @ base batch {base_batch} -> {p['scaled_lr']:.4g} at batch "
          f"{p['effective_batch']}" if base_batch is not None else
          f"{view['optimizer']} {p['base_lr']:g} -> {p['scaled_lr']:.4g} at batch {p['effective_batch']}")
    lines = [
        f"profile      {view['profile']} ({view['profile_reason']})",
        f"device       {p['device']}: {p['device_reason']}",
        f"precision    {_chosen(p['precision'], p['precision_requested'], p['precision_reason'])}",
        f"compile      {'on, mode ' + p['compile_mode'] if p['compile'] else 'off'} ({p['compile_reason']})",
        f"speed        channels_last={p['channels_last']} tf32={p['tf32']} cudnn_benchmark={p['cudnn_benchmark']} "
        f"fused_optimizer={p['fused_optimizer']}",
        f"batch        {p['batch_size']} per device x {p['accumulation_steps']} accumulation x "
        f"{plural(p['world_size'], 'device')} = effective batch {p['effective_batch']}",
        f"LR           {lr}, schedule {view['schedule']}",
        *([f"recipe       {view['recipe']}"] if view.get("recipe") else []),
        f"workers      {_chosen(p['workers'], p['workers_requested'], p['workers_reason'])}, "
        f"prefetch {_prefetch(p)}"
        f", pin_memory={p['pin_memory']}",
        f"data         {d['spec']} ({d['kind']}): {d['train_size']:,} train / {d['val_size']:,} val, "
        f"{plural(d['num_classes'], 'class', 'classes')}, {p['image_size']} px",
        *(
            [f"classes      {classes_text(view['classes']['count'], view['classes']['names'], 80 - 13)}"]
            if view.get("classes", {}).get("names")
            else []
        ),
        f"iterations   {p['iterations_per_epoch']:,} per epoch x {plural(view['epochs'], 'epoch')}",
        f"model        {view['model']}",
        *([f"weights      {view['weights']}"] if view.get("weights") else []),
        f"tuning       {view['tuning']['line']}",
        *([f"checkpoints  {view['checkpoints']['line']}"] if view.get("checkpoints") else []),
    ]
    lines += [f"note         {n}" for n in view["notes"]]
    return lines
