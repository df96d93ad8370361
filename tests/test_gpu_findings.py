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


def _tiny_run(tmp_path, name: str, *extra: str, env: dict | None = None):  # noqa: ANN001, ANN202
    from conftest import run_subprocess
    from gpu_helpers import DETERMINISTIC, write_profile
    from loop_helpers import write_image_folder

    if not (tmp_path / "data").exists():
        write_image_folder(tmp_path / "data")
        write_profile(tmp_path / "det.yaml", loader=DETERMINISTIC["loader"], speed=DETERMINISTIC["speed"],
                      optim={"epochs": 1})
    return run_subprocess("train", "--profile", "det.yaml", "--data", "data", "--model", "tiny_cnn",
                          "--run-name", name, *extra, env={"OMP_NUM_THREADS": "1", **(env or {})}, cwd=tmp_path,
                          timeout=600)


@pytest.mark.timeout(900)
def test_resume_a_checkpoint_that_holds_more_gpus_rng_states(tmp_path) -> None:  # noqa: ANN001
    """Finding 3 on one GPU: a checkpoint holding the RNG states of two GPUs (as fasttrain wrote them before,
    from a 2xT4 run) resumes on this one; the restored state is the first device's."""
    import torch

    from fasttrain.train.state import checkpoint as ck

    first = _tiny_run(tmp_path, "r")
    assert first.returncode == 0, first.stderr[-3000:]
    last = tmp_path / "runs" / "r" / "last.pt"
    payload = ck.load(last)
    payload.pop("checksum", None)
    payload.pop("checksum_note", None)
    own = payload["rng"]["cuda"]
    payload["rng"]["cuda"] = [own, torch.zeros_like(own)]  # two GPUs' states, the way a 2-GPU machine wrote them
    payload["rng"].pop("cuda_device", None)
    ck.save_atomic(payload, last)
    resumed = _tiny_run(tmp_path, "r", "--resume", "runs/r", "--epochs", "2")
    assert resumed.returncode == 0, resumed.stderr[-3000:]


@pytest.mark.timeout(900)
def test_resume_a_two_gpu_run_on_one_gpu(tmp_path) -> None:  # noqa: ANN001
    """Finding 3 on a 2-GPU machine: a one-process run where two GPUs are visible (a Kaggle 2xT4 notebook), then
    resumed where only one is."""
    import torch
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    first = _tiny_run(tmp_path, "two", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = _tiny_run(tmp_path, "two", "--resume", "runs/two", "--epochs", "2", env={"CUDA_VISIBLE_DEVICES": "0"})
    assert resumed.returncode == 0, resumed.stderr[-3000:]
