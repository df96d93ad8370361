"""Tuning, its pure half: settings chosen by measurement on this machine, and one voice for every command's advice.

Tuning has two homes on purpose. This folder holds what needs no model and no torch: doctor, estimate, bench and
profiles read it, and they sit below train/ in the layers (docs/architecture.md), so it cannot live there. The
timed trial runs the training step itself, so it lives in train/ (train/trial/): it measures, this folder
remembers and decides.

The measurement cache (store.py: one JSON file under the fasttrain cache, keyed by machine, model, data kind,
image size, batch and torch version), the pure decisions the timed trial makes from recorded timings
(decide.py: the trial's budget, which candidate wins, whether compile repays itself, workers against compute
threads) and the advice every command gives from the same measurements (advice.py: doctor, bench, estimate and
train's verdict never suggest a setting another command measured slower here). The trial itself needs a model
and the training step: it lives in train/trial/tune.py.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "TrialKey": "store",
    "Measurement": "store",
    "machine_id": "store",
    "load_cache": "store",
    "record": "store",
    "machine_measurements": "store",
    "trial_budget_s": "decide",
    "better": "decide",
    "compile_pays": "decide",
    "pick_workers": "decide",
    "advise": "advice",
    "describe": "advice",
    "workers_advice": "advice",
    "loader_key": "store",
})
