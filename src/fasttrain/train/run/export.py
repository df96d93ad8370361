"""The run's files for whoever uses the model: `model.safetensors` + `model.json` (models/saved.py), the one copy of
the best weights (or of the last, when no epoch was validated), written by the loop with its checkpoints
(train/loop/checkpointing.py: the policy made here knows the model.json fields), and at the end what the summary says
of them: where the weights are and what the run's checkpoint files weigh."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from fasttrain.train.run.summary_record import RunSummary
from fasttrain.train.state.checkpoint_policy import BEST_FILE, CheckpointPolicy
from fasttrain.train.types import Prepared


def model_meta(prep: Prepared) -> dict[str, Any]:
    """model.json's fields but those of the epoch the weights come from (`from`, `epoch`, `val_acc1`)."""
    from fasttrain.train.run.summary import init_record

    bundle, plan, augment = prep.bundle, prep.plan, prep.resolved.profile.augment
    meta = {"model": prep.model_name, "num_classes": bundle.num_classes, "class_names": list(bundle.class_names),
            "image_size": plan.image_size, "mean": list(bundle.norm[0]), "std": list(bundle.norm[1]),
            "crop_pct": augment.val_crop_pct, "channels_last": plan.channels_last, "init": init_record(prep).to_json(),
            "test_flip": augment.validates_mirrored}
    if ":" in prep.model_name:  # a module:callable builder: where its module was imported from, to rebuild it
        from fasttrain.models.registry import builder_folder
        meta["module_dir"] = builder_folder(prep.model_name)
    return meta


def checkpoint_policy(prep: Prepared, run_dir: Path) -> CheckpointPolicy:
    """The files this run keeps: last.pt unless checkpoint.save_last is false, epoch_N.pt with --save-every, the
    model files with their model.json."""
    return CheckpointPolicy(run_dir, prep.args.save_every, keep_last=prep.resolved.profile.checkpoint.save_last,
                            model_meta=model_meta(prep))


def write_model_files(prep: Prepared, run_dir: Path, summary: RunSummary) -> RunSummary:
    """At the end: a folder of an earlier fasttrain that has best.pt settles it (_settle_best_pt); then the summary's
    `checkpoint_best`, `checkpoint_last` and `checkpoint_bytes` (what is on disk, by file) and `model_files`:
    `.../model.safetensors + model.json (epoch N, the best)`, or None without model files. A failure to write is
    said (in the summary's notes), never a failed run."""
    from fasttrain.models.saved import META_FILE, WEIGHTS_FILE
    from fasttrain.train.state.checkpoint_size import run_files

    best = run_dir / BEST_FILE
    if best.is_file():  # a folder of an earlier fasttrain
        summary = _settle_best_pt(prep, best, summary)
    try:
        meta = json.loads((run_dir / META_FILE).read_text())
    except (OSError, ValueError):
        meta = {}
    kept_best = str(meta.get("from", "")).startswith("best") and (run_dir / WEIGHTS_FILE).is_file()
    summary = replace(summary,
        checkpoint_best=str(best) if best.is_file() else str(run_dir / WEIGHTS_FILE) if kept_best else None,
        checkpoint_last=str(run_dir / "last.pt") if (run_dir / "last.pt").is_file() else None,
        checkpoint_bytes=run_files(run_dir))
    if not (run_dir / WEIGHTS_FILE).is_file():
        return replace(summary, model_files=None)
    which = "the best" if kept_best else "the last"
    return replace(summary, model_files=f"{run_dir / WEIGHTS_FILE} + {META_FILE} (epoch {meta.get('epoch')}, {which})")


def _settle_best_pt(prep: Prepared, best: Path, summary: RunSummary) -> RunSummary:
    """An earlier fasttrain's best.pt (this one removes it whenever it writes the model files, so it is the newest
    best): the model files from it unless they hold its tensors already (a run stopped before its end wrote them),
    then best.pt removed: one copy of the best weights."""
    import torch
    from safetensors.torch import load_file

    from fasttrain.core.files import write_text_atomic
    from fasttrain.models.saved import META_FILE, WEIGHTS_FILE, save_trained
    from fasttrain.train.state.checkpoint import load

    try:
        payload = load(best, hint=False)
        state, weights = payload["model"], best.parent / WEIGHTS_FILE
        kept = load_file(str(weights)) if weights.is_file() else {}
        if kept.keys() != state.keys() or not all(torch.equal(v, state[k]) for k, v in kept.items()):
            save_trained(best.parent, state, {**model_meta(prep), "from": "best epoch", "epoch": payload.get("epoch"),
                                              "val_acc1": payload.get("val_acc1")})
        elif (meta := json.loads((best.parent / META_FILE).read_text())).get("from") == BEST_FILE:
            write_text_atomic(best.parent / META_FILE, json.dumps({**meta, "from": "best epoch"}, indent=1) + "\n")
        best.unlink()
    except Exception as exc:
        note = f"the model files were not written ({type(exc).__name__}: {exc}); the weights are in {best}"
        return replace(summary, notes=(*summary.notes, note))
    return summary
