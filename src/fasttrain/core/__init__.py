"""The bottom layer: what every other folder may use, and nothing heavy.

Errors that become exit codes, how numbers read on screen, the terminal check and one console per
stream, did-you-mean suggestions, the cache directory, atomic file writes, the shared batch/LR/RAM arithmetic
(`fasttrain.core.arithmetic`),
and the lazy package faces themselves.
"""
from fasttrain.core.exports import lazy_face

__getattr__, __dir__, __all__ = lazy_face(__name__, {
    "Problem": "errors",
    "Problems": "errors",
    "UserError": "errors",
    "JobFailed": "errors",
    "is_tty": "console",
    "print_json": "console",
    "fmt_bytes": "format",
    "fmt_clock": "format",
    "fmt_duration": "format",
    "fmt_number": "format",
    "close_matches": "suggest",
    "did_you_mean": "suggest",
    "lazy_face": "exports",
    "default_cache_dir": "cache_dir",
    "writable_cache_dir": "cache_dir",
    "write_text_atomic": "files",
})
