"""`python tests/gpu_det_main.py ARGS` = `fasttrain ARGS` with CUDA made deterministic first.

fasttrain has no determinism switch; a bit-for-bit comparison on a GPU needs cuDNN's deterministic algorithms
and a fixed cuBLAS workspace (CUBLAS_WORKSPACE_CONFIG must be set before CUDA starts: the caller's environment
sets it, this file checks it). Deterministic-algorithm checks warn rather than fail: max-pool and adaptive
average-pool backward have no deterministic CUDA kernel, but with non-overlapping windows each input gets one
contribution, so their results do not depend on the order of atomic adds.
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    if os.environ.get("CUBLAS_WORKSPACE_CONFIG") not in (":4096:8", ":16:8"):
        print("gpu_det_main: set CUBLAS_WORKSPACE_CONFIG=:4096:8 before starting", file=sys.stderr)
        sys.exit(2)
    import torch

    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    from fasttrain.cli import main

    sys.exit(main(sys.argv[1:]))
