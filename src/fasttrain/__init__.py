"""fasttrain: fast, measured PyTorch training on one machine.

From Python (a notebook, a script): `fasttrain.train(model, data, ...)`, `fasttrain.doctor()`,
`fasttrain.estimate(model, ...)` and `fasttrain.plan(model, data, ...)`, the commands of the same names
(fasttrain/api/), and their results `RunSummary`, `Report`, `Forecast` and `Plan`; `fasttrain.predict(run, data)`
(a plain function, api/predictions.py) returns `Predictions`; `fasttrain.report(run, ...)` (api/reports.py) a run's
plots, shown inline. Each of those five names is also a part of the package (train/, doctor/, estimate/, plan.py,
report/) that can be called (core/exports.py callable_members).
Importing fasttrain imports neither torch nor timm: a function imports what it needs when it runs.
"""
from fasttrain.core.exports import callable_members, lazy_face

__version__ = "0.1.0"

callable_members(__name__, {**{name: f"fasttrain.api.calls:{name}" for name in ("train", "doctor", "estimate", "plan")},
                            "report": "fasttrain.api.reports:report"})
__getattr__, __dir__, _results = lazy_face(
    __name__,
    {
        **dict.fromkeys(("RunSummary", "Report", "Forecast", "Plan"), "api.results"),
        "predict": "api.predictions",
        "Predictions": "api.predictions",
    },
)
__all__ = sorted([*_results, "train", "doctor", "estimate", "plan", "report", "__version__"])
