"""Doctor: what is wrong with this machine for training, and how to fix it.

Rules over a HardwareReport (live or recorded) and the profile `train` would run, each an ok / warn /
fail Finding with its numbers and the knob to turn, and the panels `doctor` prints.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "run_rules": "checks",
    "worst_status": "checks",
    "feed_target": "checks",
    "Finding": "findings",
    "Context": "findings",
    "render": "view",
})
