"""The end of a run, for whoever uses the model: the best weights (or the last, when no epoch was validated) as
`model.safetensors` + `model.json` in the run folder (models/saved.py), read from the checkpoint the run wrote."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from fasttrain.train.types import Prepared


def write_model_files(prep: Prepared, run_dir: Path, summary: dict[str, Any]) -> str | None:
    """Write the model files; -> `model.safetensors + model.json` for the summary, or None when the run has no
    checkpoint yet. A failure to write is said, never a failed run: the checkpoints hold the same weights."""
    from fasttrain.datasets.transforms import CROP_PCT
    from fasttrain.models.saved import META_FILE, WEIGHTS_FILE, save_trained
    from fasttrain.train.state.checkpoint import load

    source = next((run_dir / name for name in ("best.pt", "last.pt") if (run_dir / name).is_file()), None)
    if source is None:
        return None
    try:
        state = load(source, hint=False)["model"]
        bundle, plan = prep.bundle, prep.plan
        meta = {"model": prep.model_name, "num_classes": bundle.num_classes, "class_names": list(bundle.class_names),
                "image_size": plan.image_size, "mean": list(bundle.norm[0]), "std": list(bundle.norm[1]), "crop_pct": CROP_PCT,
                "channels_last": plan.channels_last, "from": source.name, "init": summary.get("init"),
                "test_flip": prep.resolved.profile.augment.validates_mirrored,
                "epoch": summary.get("best_epoch") if source.name == "best.pt" else summary.get("epochs_run"),
                "val_acc1": summary.get("best_val_acc1") if source.name == "best.pt" else summary.get("final_val_acc1")}
        if ":" in prep.model_name:  # a module:callable builder: where its module was imported from, to rebuild it
            from fasttrain.models.registry import builder_folder
            meta["module_dir"] = builder_folder(prep.model_name)
        save_trained(run_dir, state, meta)
    except Exception as exc:  # noqa: BLE001 - see docstring
        summary.setdefault("notes", []).append(f"the model files were not written ({type(exc).__name__}: {exc}); "
                                               f"the weights are in {source}")
        return None
    return f"{run_dir / WEIGHTS_FILE} + {META_FILE} (from {source.name})"

