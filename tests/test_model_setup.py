"""model_setup: the CPU allocator setting behind `train` and `estimate --measure` (keep_freed_memory)."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from fasttrain.models.cpu_allocator import keep_freed_memory

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")


# 64 MiB touched and freed sixteen times, like a step's activations: glibc's default mmaps such a block and unmaps
# it on free (16,384 page faults every time); kept, the heap grows during the first rounds to a layout that fits it
# (which round varies with the process and with what was imported before: seen from round 2 to round 5), then
# reuses it, so the last eight rounds must be fault-free. In a fresh process: pytest's own heap layout is no
# training process's.
_FAULTS = """
import resource, sys, torch
from fasttrain.models.setup import configure_backends
from loop_helpers import cpu_plan
notes = configure_backends(cpu_plan()[0])
faults = []
for _ in range(16):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones(16 * 2**20)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(max(faults[-8:]), any(n.startswith("CPU allocator:") for n in notes))
"""


@glibc_only
def test_a_cpu_plan_keeps_freed_memory_so_a_step_does_not_fault_it_in_again() -> None:
    tests = Path(__file__).parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tests.parent / "src"), str(tests)])}
    out = subprocess.run([sys.executable, "-c", _FAULTS], capture_output=True, text=True, env=env, check=True)
    faults, noted = out.stdout.split()
    assert noted == "True"
    assert int(faults) < 1000


@pytest.mark.parametrize("env", [("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0"), ("MALLOC_ARENA_MAX_", "2")])
def test_a_user_malloc_setting_is_left_alone(monkeypatch: pytest.MonkeyPatch, env: tuple[str, str]) -> None:
    monkeypatch.setenv(*env)
    assert keep_freed_memory() is None
