"""Issue 24, finding 4: an out-of-memory error in the optimizer step (the first one allocates the optimizer
state; the multi-tensor path adds full-size temporaries) ended the run, because the back-off wrapped forward and
backward only. The multi-tensor SGD kernel is made to fail the way the allocator does (torch.OutOfMemoryError);
the per-parameter one still fits. In-process CLI runs of the real Trainer on real image files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from loop_helpers import DETERMINISTIC_PROFILE, write_image_folder

from fasttrain.train.state import checkpoint as ck

PROFILE = DETERMINISTIC_PROFILE.replace("optim:\n", "optim:\n  optimizer: sgd\n  schedule: constant\n") + \
    "  fused_optimizer: false\n"


@pytest.fixture
def train(cli, tmp_path: Path):
    write_image_folder(tmp_path / "data")
    (tmp_path / "tiny.yaml").write_text(PROFILE)

    def run(name: str) -> tuple[object, Path]:
        res = cli("train", "--profile", str(tmp_path / "tiny.yaml"), "--data", str(tmp_path / "data"),
                  "--model", "tiny_cnn", "--runs-dir", str(tmp_path / "runs"), "--run-name", name, "--json")
        return res, tmp_path / "runs" / name
    return run


def _multi_tensor_out_of_memory(monkeypatch: pytest.MonkeyPatch, times: int | None) -> list[int]:
    """torch.optim.sgd's multi-tensor kernel raises the allocator's error (`times` calls, None: always)."""
    import torch.optim.sgd as sgd
    real, calls = sgd._multi_tensor_sgd, []

    def fails(*args, **kwargs):
        calls.append(1)
        if times is None or len(calls) <= times:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (test)")
        return real(*args, **kwargs)

    monkeypatch.setattr(sgd, "_multi_tensor_sgd", fails)
    return calls


def test_out_of_memory_in_the_first_optimizer_step_is_retried_leaner(train, monkeypatch) -> None:
    ref, ref_run = train("ref")
    assert ref.code == 0, ref.err
    _multi_tensor_out_of_memory(monkeypatch, times=None)  # the multi-tensor path never fits: per-parameter does
    res, run = train("oom")
    assert res.code == 0, res.err  # was exit 1 with the allocator's error
    summary = json.loads(res.out)
    event, = summary["oom_backoffs"]
    assert event["stage"] == "optimizer step" and event["step"] == 1 and event["batch_from"] == event["batch_to"]
    assert "out of memory in the optimizer step at step 1 (epoch 1, batch 1)" in res.err
    assert "per-parameter updates" in res.err
    assert summary["epochs_run"] == 2 and summary["micro_batch"] == 4
    weights, ref_weights = ck.load(run / "last.pt")["model"], ck.load(ref_run / "last.pt")["model"]
    assert all(torch.allclose(weights[k], ref_weights[k], atol=1e-6) for k in weights)  # the same updates


def test_an_optimizer_step_that_never_fits_stops_with_a_clear_message(train, monkeypatch) -> None:
    import torch.optim.sgd as sgd

    def never(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (test)")

    monkeypatch.setattr(sgd, "_multi_tensor_sgd", never)
    monkeypatch.setattr(sgd, "_single_tensor_sgd", never)
    res, _ = train("never")
    assert res.code == 1, res.err
    assert "the weights, their gradients and the optimizer state do not fit" in res.err
    assert "Traceback" not in res.err
