"""UI: the live training dashboard, a TrainListener the `train` command hands to the run.

A repainting Rich screen on a terminal, plain lines when piped or in CI, nothing with --quiet; the
formatting shared by the three modes lives in ui/dashboard_format.py.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "Dashboard": "dashboard",
    "choose_mode": "dashboard",
})
