"""The Python API: `fasttrain.train()`, `.doctor()`, `.estimate()` and `.plan()`, the commands of the same names run
from Python (a notebook, a script), returning typed results that show themselves as tables in a notebook.

The package's own face (fasttrain/__init__.py) makes these four names callable; this face lists them with their
result types. Importing it imports neither torch nor timm.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "train": "calls",
    "plan": "calls",
    "doctor": "calls",
    "estimate": "calls",
    "RunSummary": "results",
    "Report": "results",
    "Forecast": "results",
    "Plan": "results",
    "predict": "predictions",
    "Predictions": "predictions",
    "report": "reports",
    "RunReport": "reports",
})
