"""Bench: what each setting, the loader and the batch size are worth on this machine.

`bench speedups` (each speed setting against a baseline, interleaved, medians), `bench loader`
(workers x prefetch against the RAM budget), result files with the machine they were measured on,
`bench compare`, and their tables.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "bench_speedups": "speedups",
    "load_claims": "claims",
    "sweep": "loader",
    "find_knee": "loader_choice",
    "new_bench_dir": "results",
    "write_result": "results",
    "read_result": "results",
    "compare": "results",
})
