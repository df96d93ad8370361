"""Issue 24 on a real GPU (marker `gpu`): what only a CUDA device shows of the findings of the line-by-line
reading (docs/gpu.md lists each finding, its fix and its CPU test). Skipped with the reason without CUDA."""
from __future__ import annotations

import pytest

pytestmark = pytest.mark.gpu


def test_the_build_has_kernels_for_this_gpu() -> None:
    """Finding 1: the arch rule says yes for the GPU at hand (it runs kernels, so the rule must agree), and the
    probe records the list doctor judges."""
    import torch

    from fasttrain.hardware import arch
    from fasttrain.hardware.machine import probe

    major, minor = torch.cuda.get_device_capability(0)
    assert arch.runs_on(torch.cuda.get_arch_list(), f"{major}.{minor}")
    report = probe(import_torch=True)
    assert report.torch.arch_list == torch.cuda.get_arch_list()
    assert arch.arch_mismatches(report) == []
