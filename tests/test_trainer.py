"""trainer.py / step.py: the loop's arithmetic and its speed paths, on the CPU with tiny models."""
from __future__ import annotations

import copy
import gc
import json
import math
from pathlib import Path
from typing import ClassVar

import pytest
import torch
import torch.nn.functional as F
from loop_helpers import cpu_plan, make_trainer, tiny_mlp

from fasttrain.train.loop.batches import window_length
from fasttrain.train.loop.epoch_row import EpochRow
from fasttrain.train.loop.events import Collaborators
from fasttrain.train.loop.synthetic import run_synthetic_steps

SGD_PLAIN = {"optimizer": "sgd", "momentum": 0.0, "weight_decay": 0.0, "schedule": "constant", "base_lr": 0.5,
             "base_batch": 8}


def _batches(n: int, size: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(size, 12, generator=g), torch.randint(0, 3, (size,), generator=g)) for _ in range(n)]


def _reference_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float) -> None:
    model.zero_grad()
    F.cross_entropy(model(x), y).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad


def test_window_length_handles_a_final_partial_window() -> None:
    assert [window_length(i, 5, 2) for i in range(5)] == [(2, False), (2, True), (2, False), (2, True), (1, True)]
    assert [window_length(i, 3, 1) for i in range(3)] == [(1, True)] * 3


def test_accumulation_equals_one_large_batch() -> None:
    plan, profile = cpu_plan(loader={"batch_size": 2, "num_workers": 0, "image_size": 16},
                             optim={**SGD_PLAIN, "accumulation_steps": 4})
    assert plan.effective_batch == 8 and plan.scaled_lr == pytest.approx(0.5)
    model = tiny_mlp()
    reference = copy.deepcopy(model)
    micro = _batches(4, 2)
    make_trainer(plan, profile.optim, model, batches=4).train_epoch(micro, epoch=0)
    _reference_step(reference, torch.cat([b[0] for b in micro]), torch.cat([b[1] for b in micro]), 0.5)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_final_partial_window_divides_by_its_real_length() -> None:
    plan, profile = cpu_plan(loader={"batch_size": 2, "num_workers": 0, "image_size": 16},
                             optim={**SGD_PLAIN, "accumulation_steps": 2})
    model = tiny_mlp()
    reference = copy.deepcopy(model)
    batches = _batches(3, 2, seed=1)
    trainer = make_trainer(plan, profile.optim, model, batches=3)
    trainer.train_epoch(batches, epoch=0)
    assert trainer.engine.schedule.step == 2  # two optimizer steps: a full window and a window of one batch
    lr = plan.scaled_lr
    _reference_step(reference, torch.cat([batches[0][0], batches[1][0]]), torch.cat([batches[0][1], batches[1][1]]), lr)
    _reference_step(reference, *batches[2], lr)
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_clipping_sees_unscaled_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    """fp16 with a GradScaler (forced on the CPU): clip_grad_norm_ must run after unscale_."""
    plan, profile = cpu_plan(optim={**SGD_PLAIN, "clip_grad_norm": 1e6})
    plan.precision = "fp16-mixed"  # the plan would fall back to fp32 on a CPU; the loop honours what it is given
    model = tiny_mlp()
    x, y = _batches(1, 8, seed=2)[0]
    with torch.autocast("cpu", dtype=torch.float16):  # the true gradient, under the same autocast
        probe = copy.deepcopy(model)
        loss = F.cross_entropy(probe(x).float(), y)
    loss.backward()
    true_norm = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in probe.parameters()])).item()
    seen: list[float] = []
    real_clip = torch.nn.utils.clip_grad_norm_

    def spy(params, max_norm, *args, **kwargs):
        params = list(params)
        seen.append(torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])).item())
        return real_clip(params, max_norm, *args, **kwargs)

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", spy)
    trainer = make_trainer(plan, profile.optim, model, batches=1)
    assert trainer.engine.precision.scaler is not None and trainer.engine.precision.scale == 2.0 ** 16
    trainer.train_epoch([(x, y)], epoch=0)
    assert len(seen) == 1
    assert seen[0] == pytest.approx(true_norm, rel=2e-2), "clip saw scaled gradients (clip before unscale)"


def test_clipping_limits_the_update() -> None:
    plan, profile = cpu_plan(optim={**SGD_PLAIN, "clip_grad_norm": 1e-3})
    model = tiny_mlp()
    before = [p.detach().clone() for p in model.parameters()]
    make_trainer(plan, profile.optim, model, batches=1).train_epoch(_batches(1, 8), epoch=0)
    moved = torch.linalg.vector_norm(torch.stack([(p - b).norm()
                                                  for p, b in zip(model.parameters(), before, strict=True)]))
    assert moved.item() == pytest.approx(plan.scaled_lr * 1e-3, rel=1e-3)  # lr x max_norm


def _separable(n: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """3 classes, each a bright 4x4 patch in its own place on a 3x8x8 image."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        y = torch.randint(0, 3, (8,), generator=g)
        x = torch.randn(8, 3, 8, 8, generator=g) * 0.3
        for i, c in enumerate(y.tolist()):
            x[i, :, 2 * c:2 * c + 4, 2 * c:2 * c + 4] += 2.0
        out.append((x, y))
    return out


def _conv_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(2),
                               torch.nn.Flatten(), torch.nn.Linear(32, 3))


def test_loss_goes_down_and_validation_learns(tmp_path: Path) -> None:
    plan, profile = cpu_plan(loader={"batch_size": 8, "num_workers": 0, "image_size": 8},
                             optim={"optimizer": "adamw", "base_lr": 0.01, "base_batch": 8, "epochs": 4},
                             speed={"channels_last": True, "precision": "bf16-mixed"})
    assert plan.precision == "bf16-mixed" and plan.channels_last
    train, val = _separable(12, 0), _separable(4, 1)

    class Log:
        steps: ClassVar[list[dict]] = []
        epochs: ClassVar[list[tuple[EpochRow, int]]] = []

        def log_step(self, row: dict) -> None:
            self.steps.append(row)

        def log_epoch(self, row: EpochRow) -> None:
            self.epochs.append((row, gc.get_freeze_count()))

    log = Log()
    from fasttrain.train.state.checkpoint_policy import CheckpointPolicy
    trainer = make_trainer(plan, profile.optim, _conv_net(), batches=len(train),
                      collaborators=Collaborators(runlog=log, checkpoints=CheckpointPolicy(tmp_path)))
    assert trainer.model.training and next(trainer.model.parameters()).is_contiguous(memory_format=torch.channels_last)
    result = trainer.fit(train, val, epochs=4)
    losses = [row.train_loss for row in result.history]
    assert losses[-1] is not None and losses[0] is not None and losses[-1] < 0.5 * losses[0]
    last = result.history[-1]
    assert last.val_acc1 is not None and last.val_acc1 >= 0.9 and last.val_acc5 is None  # 3 classes: no acc@5
    assert result.sanity is not None and result.sanity["val_images"] == 16  # 2 batches before epoch 1
    assert len(log.epochs) == 4 and log.steps[0]["loss"] is not None
    assert {"last.pt", "model.safetensors"} <= {p.name for p in tmp_path.iterdir()}
    # The imports' objects stay out of full collections while the epochs run, and are handed back after (heap.py).
    assert all(frozen > 10_000 for _, frozen in log.epochs) and gc.get_freeze_count() == 0


def test_the_heap_freeze_nests_and_hands_everything_back() -> None:
    from fasttrain.train.loop.heap import long_lived_objects_frozen
    assert gc.get_freeze_count() == 0
    with long_lived_objects_frozen():
        outer = gc.get_freeze_count()
        with long_lived_objects_frozen():  # a loop inside a loop (the trial's candidates) freezes nothing new
            leftover = [[] for _ in range(100)]
            assert gc.get_freeze_count() == outer
        assert gc.get_freeze_count() == outer > 0
    assert gc.get_freeze_count() == 0 and leftover
    with pytest.raises(RuntimeError), long_lived_objects_frozen():
        raise RuntimeError("a run that fails")
    assert gc.get_freeze_count() == 0
    gc.freeze()  # a process that freezes for itself keeps its freeze, and its frozen set, after a run
    try:
        theirs = gc.get_freeze_count()
        with long_lived_objects_frozen():
            assert gc.get_freeze_count() == theirs
        assert gc.get_freeze_count() == theirs
    finally:
        gc.unfreeze()


def test_compiled_channels_last_model_trains() -> None:
    plan, profile = cpu_plan(loader={"batch_size": 8, "num_workers": 0, "image_size": 8},
                             optim={"optimizer": "sgd", "base_lr": 0.05, "base_batch": 8, "schedule": "constant"},
                             speed={"compile": True, "channels_last": True})
    assert plan.compile
    warnings: list[str] = []
    trainer = make_trainer(plan, profile.optim, _conv_net(), batches=3,
                      collaborators=Collaborators(warn=warnings.append))
    before = [p.detach().clone() for p in trainer.model.parameters()]
    trainer.train_epoch(_separable(3, 0), epoch=0)
    assert warnings == [], warnings
    assert trainer.engine.runner.active, "fell back to eager"
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.model.parameters(), strict=True))


def test_compile_failure_falls_back_to_eager_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    import fasttrain.models.setup as ms

    def broken_compile(module, mode=None, dynamic=None):
        def call(*args):
            raise RuntimeError("inductor: no C++ compiler found")
        return call

    monkeypatch.setattr(ms.torch, "compile", broken_compile)
    plan, profile = cpu_plan(optim={**SGD_PLAIN}, speed={"compile": True})
    warnings: list[str] = []
    trainer = make_trainer(plan, profile.optim, tiny_mlp(), batches=2,
                      collaborators=Collaborators(warn=warnings.append))
    trainer.train_epoch(_batches(2, 4), epoch=0)
    assert len(warnings) == 1 and "failed, training eager" in warnings[0] and "no C++ compiler" in warnings[0]
    assert trainer.engine.schedule.step == 2


def test_activation_checkpointing_gives_the_same_gradients() -> None:
    plan, profile = cpu_plan(optim={**SGD_PLAIN})
    x, y = _separable(1, 3)[0]
    plain = make_trainer(plan, profile.optim, _conv_net(), batches=1)
    ckpt = make_trainer(plan, profile.optim, _conv_net(), batches=1, activation_checkpointing=True)
    assert any("checkpoint" in n for n in ckpt.notes)
    plain.train_epoch([(x, y)], epoch=0)
    ckpt.train_epoch([(x, y)], epoch=0)
    for a, b in zip(plain.model.state_dict().values(), ckpt.model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b)


def test_early_stopping_after_patience_epochs_without_a_better_val_acc() -> None:
    plan, profile = cpu_plan(loader={"batch_size": 8, "num_workers": 0, "image_size": 8},
                             optim={**SGD_PLAIN, "base_lr": 1e-12, "early_stopping_patience": 2, "epochs": 10})
    trainer = make_trainer(plan, profile.optim, _conv_net(), batches=2)
    result = trainer.fit(_separable(2, 0), _separable(2, 1), epochs=10)
    assert result.stopped_early and result.epochs_run == 3 and result.best_epoch == 1  # LR ~0: nothing improves
    assert any("early stop after epoch 3" in n for n in result.notes)


def test_fp16_overflow_step_is_skipped_and_reported() -> None:
    plan, profile = cpu_plan(optim={**SGD_PLAIN})
    plan.precision = "fp16-mixed"

    class Log:
        rows: ClassVar[list[dict]] = []

        def log_step(self, row: dict) -> None:
            self.rows.append(row)

    trainer = make_trainer(plan, profile.optim, tiny_mlp(), batches=2, collaborators=Collaborators(runlog=Log()))
    (x, y), good = _batches(2, 4)
    # fp16 overflows -> inf loss and gradients -> the GradScaler skips the step and halves its scale
    row = trainer.train_epoch([(x * 1e30, y), good], epoch=0)
    assert Log.rows[0]["skipped"] is True and Log.rows[0]["amp_scale"] == 2.0 ** 15
    assert Log.rows[-1]["skipped"] is False and Log.rows[-1]["amp_scale"] == 2.0 ** 15
    assert row["train_nonfinite_batches"] == 1 and math.isfinite(row["train_loss"])


def test_diverged_training_fails_the_job() -> None:
    from fasttrain.core.errors import JobFailed
    plan, profile = cpu_plan(optim={**SGD_PLAIN})
    x, y = _batches(1, 4)[0]
    with pytest.raises(JobFailed, match="diverged"):
        make_trainer(plan, profile.optim, tiny_mlp(), batches=1).train_epoch([(x * float("nan"), y)], epoch=0)


def test_run_synthetic_steps_reports_throughput() -> None:
    plan, _ = cpu_plan(loader={"batch_size": 4, "num_workers": 0, "image_size": 16})
    from fasttrain.models.tiny import tiny_cnn
    out = run_synthetic_steps(plan, tiny_cnn(num_classes=5, width=4), image_size=16, num_classes=5, steps=3,
                              warmup_steps=1)
    assert set(out) == {"images_per_s", "step_time_s", "peak_memory_bytes"}
    assert out["images_per_s"] > 0 and out["step_time_s"] > 0 and out["peak_memory_bytes"] > 0
    assert out["images_per_s"] == pytest.approx(4 / out["step_time_s"])
    json.dumps(out)
