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


def _tiny_run(tmp_path, name: str, *extra: str, env: dict | None = None):
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
def test_resume_a_checkpoint_that_holds_more_gpus_rng_states(tmp_path) -> None:
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
def test_resume_a_two_gpu_run_on_one_gpu(tmp_path) -> None:
    """Finding 3 on a 2-GPU machine: a one-process run where two GPUs are visible (a Kaggle 2xT4 notebook), then
    resumed where only one is."""
    import torch
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    first = _tiny_run(tmp_path, "two", env={"CUDA_VISIBLE_DEVICES": "0,1"})
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = _tiny_run(tmp_path, "two", "--resume", "runs/two", "--epochs", "2", env={"CUDA_VISIBLE_DEVICES": "0"})
    assert resumed.returncode == 0, resumed.stderr[-3000:]


def _cuda_engine(model, optim=None, nonfinite_guard: bool = True, **plan_changes):
    """A StepEngine on cuda:0 with the back-off on, for a plan of the small CPU profile moved to the GPU."""
    import dataclasses

    from loop_helpers import cpu_plan

    from fasttrain.train.loop.step import StepEngine

    plan, profile = cpu_plan(speed={"precision": "fp32", "compile": False, "fused_optimizer": False})
    plan = dataclasses.replace(plan, device="cuda", **plan_changes)
    warnings: list[str] = []
    engine = StepEngine.build(plan, optim or profile.optim, model, batches_per_epoch=100, warn=warnings.append,
                              nonfinite_guard=nonfinite_guard)
    return engine, warnings


@pytest.mark.timeout(300)
def test_out_of_memory_in_the_first_optimizer_step_under_a_real_limit() -> None:
    """Finding 4: P = 246 MiB of weights. Forward and backward need ~2P; the first multi-tensor SGD step with
    weight decay needs 4P (weights, gradients, the decayed copy of every gradient, the momentum buffers), over
    the 900 MiB limit; the per-parameter retry needs 3P plus one layer. The run goes on."""
    import torch
    from gpu_helpers import allocator_limit, release_cuda
    from torch import nn

    from fasttrain.profiles.schema import OptimSpec

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 2048, bias=False),
                          *[nn.Linear(2048, 2048, bias=False) for _ in range(15)])
    optim = OptimSpec(optimizer="sgd", momentum=0.9, weight_decay=1e-4, schedule="constant")
    try:
        with allocator_limit(900 * 2**20):
            engine, warnings = _cuda_engine(model, optim)
            images, targets = torch.randn(8, 3, 16, 16), torch.randint(0, 2048, (8,))
            for index in range(3):
                out = engine.step((images, targets), index, 3, epoch=0, measure=False)
            torch.cuda.synchronize()
        assert out.closed and bool(torch.isfinite(out.loss))
        event, = engine.backoff.events
        assert event["stage"] == "optimizer step" and event["step"] == 1, engine.backoff.events
        assert any("out of memory in the optimizer step" in w for w in warnings), warnings
    finally:
        release_cuda()


LAUNCHER_SCRIPT = """
import os, sys, pynvml
from fasttrain.cli import main
code = main(sys.argv[1:])
pynvml.nvmlInit()
held = [i for i in range(pynvml.nvmlDeviceGetCount()) for p in
        pynvml.nvmlDeviceGetComputeRunningProcesses(pynvml.nvmlDeviceGetHandleByIndex(i)) if p.pid == os.getpid()]
print("LAUNCHER_HOLDS_CONTEXT_ON", held)
sys.exit(code)
"""


@pytest.mark.timeout(900)
def test_auto_batch_on_two_gpus_is_one_answer_and_the_launcher_holds_no_context(tmp_path) -> None:
    """Finding 2 on a 2-GPU machine: `--nproc-per-node 2 --batch-size auto`: the search runs once (a child of
    the launcher), both ranks train its split (DDP would hang or the effective batch would be wrong otherwise),
    and the launcher holds no CUDA context on any GPU (NVML's list of compute processes) when the job is done."""
    import subprocess
    import sys

    import torch
    from conftest import child_env
    from gpu_helpers import summary, write_profile
    from loop_helpers import write_image_folder
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    write_image_folder(tmp_path / "data", train_per_class=32)
    write_profile(tmp_path / "p.yaml", optim={"epochs": 1})
    done = subprocess.run([sys.executable, "-c", LAUNCHER_SCRIPT, "train", "--profile", "p.yaml", "--data", "data",
                           "--model", "resnet18", "--batch-size", "auto", "--nproc-per-node", "2", "--run-name",
                           "auto2", "--quiet"], capture_output=True, text=True, cwd=tmp_path, timeout=800,
                          env=child_env({"CUDA_VISIBLE_DEVICES": "0,1"}))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "LAUNCHER_HOLDS_CONTEXT_ON []" in done.stdout  # NVML lists no context of the launcher on any GPU
    result = summary(tmp_path / "runs" / "auto2")
    assert result["world_size"] == 2 and result["epochs_run"] == 1, result
    assert any("batch auto" in n for n in result["notes"]), result["notes"]


class _RecordingConvs:
    """A conv net whose activations (about 8 MiB a sample at 128 px) overflow a 300 MiB limit at batch 64;
    it keeps a host copy of every input its forward sees."""

    @staticmethod
    def build():
        from torch import nn

        class Net(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.body = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1),
                                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 4))
                self.seen: list = []

            def forward(self, x):
                self.seen.append(x.detach().float().cpu())
                return self.body(x)

        return Net()


@pytest.mark.timeout(300)
def test_mixup_and_the_out_of_memory_retry_see_the_same_images() -> None:
    """Finding 5 under a real allocator limit: the retry's micro-batches are the first attempt's mixed images."""
    import torch
    from gpu_helpers import allocator_limit, release_cuda

    from fasttrain.datasets.transforms import make_mixup
    from fasttrain.profiles.schema import OptimSpec

    torch.manual_seed(0)
    model = _RecordingConvs.build()
    try:
        with allocator_limit(300 * 2**20):
            engine, _ = _cuda_engine(model)
            engine.mixup = make_mixup(OptimSpec(mixup_alpha=0.8), 4)
            images, targets = torch.randn(64, 3, 128, 128), torch.randint(0, 4, (64,))
            engine.step((images, targets), 0, 1, epoch=0, measure=False)
            torch.cuda.synchronize()
        splits = engine.backoff.splits
        assert splits > 1, "batch 64 should not fit in 300 MiB"
        assert torch.equal(torch.cat(model.seen[-splits:]), model.seen[0])
        assert not torch.equal(model.seen[0], images)  # it was mixed
    finally:
        release_cuda()


@pytest.mark.timeout(300)
def test_the_plan_names_torchs_device_zero_under_a_swapped_device_order(tmp_path) -> None:
    """Finding 6 on a 2-GPU machine: under CUDA_VISIBLE_DEVICES=1,0 the plan's GPU is torch's device 0."""
    import json
    import subprocess
    import sys

    import torch
    from conftest import child_env, run_subprocess
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs")
    env = {"CUDA_VISIBLE_DEVICES": "1,0"}
    name = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.get_device_name(0))"],
                          capture_output=True, text=True, env=child_env(env), timeout=120).stdout.strip()
    dry = run_subprocess("train", "--data", "synthetic", "--dry-run", "--json", env=env, cwd=tmp_path)
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert json.loads(dry.stdout)["plan"]["device_reason"] == name


@pytest.mark.timeout(600)
def test_the_plan_fits_the_batch_to_what_the_device_has_free(tmp_path) -> None:
    """Finding 7: another process (this test) holds all but 3 GiB of the card; the dry run of ResNet-50 at batch
    256 (~13 GiB) splits it into micro-batches for the free 3 GiB, not for the card's total."""
    import json

    from conftest import run_subprocess
    from gpu_helpers import device_nearly_full, release_cuda, write_profile
    write_profile(tmp_path / "big.yaml", loader={"batch_size": 256, "image_size": 224})
    try:
        with device_nearly_full(3 * 2**30):
            dry = run_subprocess("train", "--profile", "big.yaml", "--data", "synthetic", "--model", "resnet50",
                                 "--image-size", "224", "--dry-run", "--json", cwd=tmp_path, timeout=500)
    finally:
        release_cuda()
    assert dry.returncode == 0, dry.stderr[-3000:]
    plan = json.loads(dry.stdout)["plan"]
    assert plan["batch_size"] * plan["accumulation_steps"] == 256 and plan["batch_size"] < 256, plan
    assert any("GPU memory" in note for note in plan["notes"]), plan["notes"]


@pytest.mark.timeout(600)
def test_an_out_of_memory_first_step_keeps_torch_compile() -> None:
    """Finding 10: the first compiled step of batch 64 overflows a 300 MiB limit; the back-off retries it smaller
    and the model stays compiled (before, CompileGuard fell back to eager for the whole run)."""
    import torch
    from gpu_helpers import allocator_limit, release_cuda

    from fasttrain.models.setup import CompileGuard

    torch.manual_seed(0)
    try:
        with allocator_limit(300 * 2**20):
            engine, warnings = _cuda_engine(_RecordingConvs.build(), compile=True, compile_mode="default")
            assert isinstance(engine.runner, CompileGuard)
            images, targets = torch.randn(64, 3, 128, 128), torch.randint(0, 4, (64,))
            for index in range(2):
                engine.step((images, targets), index, 2, epoch=0, measure=False)
            torch.cuda.synchronize()
        assert engine.backoff.splits > 1
        assert engine.runner.active, engine.runner.fallback_reason
        assert not any("torch.compile" in w for w in warnings), warnings
    finally:
        release_cuda()


def test_the_side_stream_copy_gives_the_same_step() -> None:
    """Finding 11: the copy runs on its own stream (the compute stream waits for it); the step's result is the
    one a copy on the compute stream gives, bit for bit (fp32, no autotuning)."""
    import torch
    from gpu_helpers import release_cuda
    from torch import nn

    from fasttrain.train.loop.transfer import DeviceCopy

    losses = []
    for side in (True, False):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
        engine, _ = _cuda_engine(model, cudnn_benchmark=False, pin_memory=True)
        engine.copy = DeviceCopy(engine.device, channels_last=False, non_blocking=True, side_stream=side)
        assert (engine.copy.stream is not None) is side
        gen = torch.Generator().manual_seed(1)
        for index in range(3):
            batch = (torch.randn(16, 3, 32, 32, generator=gen).pin_memory(), torch.randint(0, 4, (16,), generator=gen))
            out = engine.step(batch, index, 3, epoch=0, measure=False)
        losses.append(out.loss.item())
    release_cuda()
    assert losses[0] == losses[1]


@pytest.mark.timeout(600)
def test_a_short_last_batch_is_no_recompile() -> None:
    """Finding 12 with inductor on CUDA: steps of 32 with one batch short of skipped files, then a validation
    pass whose last batch is short: one graph per mode (torch._dynamo's own count of unique graphs)."""
    import torch
    from gpu_helpers import release_cuda
    from torch import nn
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))
    engine, warnings = _cuda_engine(model, compile=True, compile_mode="default", batch_size=32)
    gen = torch.Generator().manual_seed(1)
    sizes = [32, 32, 29, 32]
    for index, n in enumerate(sizes):
        engine.step((torch.randn(n, 3, 32, 32, generator=gen), torch.randint(0, 4, (n,), generator=gen)), index,
                    len(sizes), epoch=0, measure=False)
    from fasttrain.train.loop.validation import evaluate
    evaluate(engine, [(torch.randn(n, 3, 32, 32), torch.randint(0, 4, (n,))) for n in (32, 32, 7)])
    torch.cuda.synchronize()
    release_cuda()
    assert engine.runner.active and not any("torch.compile" in w for w in warnings), warnings
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])


@pytest.mark.timeout(600)
def test_bench_speedups_fits_one_configuration_at_a_time() -> None:
    """Finding 14: five configurations of a 235 MB model (~0.7 GB each with gradients and momentum) under a 1.5 GB
    limit: all measured (before, every configuration stayed on the GPU and the later ones ran out of memory)."""
    from gpu_helpers import allocator_limit, release_cuda
    from torch import nn

    from fasttrain.bench.speedups import bench_speedups
    from fasttrain.hardware.machine import probe
    from fasttrain.profiles.schema import LoaderSpec, Profile

    def model() -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 8192), nn.ReLU(), nn.Linear(8192, 4096), nn.ReLU(),
                             nn.Linear(4096, 10))

    profile = Profile(loader=LoaderSpec(batch_size=16, num_workers=0, image_size=32))
    report = probe(import_torch=True)
    try:
        with allocator_limit(1536 * 2**20):
            result = bench_speedups(profile, report, model, image_size=32, num_classes=10, steps=2, rounds=2,
                                    warmup_steps=1, only=["channels_last", "fused_optimizer", "larger_batch"])
    finally:
        release_cuda()
    rows = {r["setting"]: r for r in result["rows"]}
    assert all(r["status"] == "measured" for r in rows.values()), rows
    assert len(rows) == 5


def test_saving_a_checkpoint_of_device_tensors_syncs_once(tmp_path) -> None:
    """Finding 15: a payload of 20 device tensors is hashed and saved with no implicit sync (torch's sync debug
    mode warns on each one: before, every tensor's own .cpu() while hashing was one), and loads verified."""
    import warnings

    import torch
    from gpu_helpers import release_cuda

    from fasttrain.train.state import checkpoint as ck

    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(10)]).cuda()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ck.save_atomic({"model": model.state_dict()}, tmp_path / "c.pt")
    finally:
        torch.cuda.set_sync_debug_mode(0)
        release_cuda()
    syncs = [w for w in caught if "synchroniz" in str(w.message)]
    assert syncs == [], [str(w.message) for w in syncs]
    assert ck.load(tmp_path / "c.pt")["checksum_note"] is None


def _unlogged_steps_set_up(precision: str):
    """Everything test_no_sync_on_unlogged_steps checks, set up and warmed up before the check begins: building
    an engine moves its model to the GPU and a batch copied there is a blocking copy, both an error under the
    check (issue 39, item 2: the baseline was built inside it, so the test failed on every GPU).
    -> (the engine, the bench's baseline engine, the batches, the baseline's images and targets on the GPU)."""
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 4))
    engine, _ = _cuda_engine(model, precision=precision, fused_optimizer=True, pin_memory=True)
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(16, 3, 32, 32, generator=gen).pin_memory(),
                torch.randint(0, 4, (16,), generator=gen).pin_memory()) for _ in range(6)]
    for index in range(2):  # the first steps allocate the optimizer state and pick kernels
        engine.step(batches[index], index, 6, epoch=0, measure=False)
    base, _ = _cuda_engine(nn.Linear(3 * 32 * 32, 4), nonfinite_guard=False, precision="fp32",
                           fused_optimizer=False)  # as bench speedups builds its baseline
    x, y = (t.cuda() for t in batches[0])
    base.forward_backward(x.flatten(1), y, 1)
    base.optimizer_step()  # first step: state allocated outside the check
    torch.cuda.synchronize()
    return engine, base, batches, x.flatten(1), y


@pytest.mark.parametrize("precision", ["fp16-mixed", "bf16-mixed", "fp32"])
def test_no_sync_on_unlogged_steps(precision: str) -> None:
    """Findings 16 and 8: with the fused optimizer, a step that is not logged (and a logged step's work up to its
    optimizer step) makes no implicit host-device sync: torch's sync debug mode raises on one. The bench's plain
    unfused baseline steps make none either (the guard's .item() is gone from them). Only the steps run under the
    check; it is reset afterwards, also when a step fails (tests/test_sync_check_order.py runs this on the CPU)."""
    import torch
    from gpu_helpers import release_cuda, syncs_raise

    if precision == "bf16-mixed" and torch.cuda.get_device_capability(0)[0] < 8:
        pytest.skip("bf16 needs compute capability 8.0 or newer")
    try:
        engine, base, batches, x, y = _unlogged_steps_set_up(precision)
        with syncs_raise():
            for index in range(2, 6):
                engine.step(batches[index], index, 6, epoch=0, measure=index == 5)  # the last one measures
            base.forward_backward(x, y, 1)
            base.optimizer_step()
    finally:
        release_cuda()
