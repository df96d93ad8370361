"""The pure forecast on fixed inputs: roofline, memory budget, largest batch, time, cost, bottleneck, unknowns."""
from __future__ import annotations

import math

import pytest

from fasttrain.estimate.calibration import DeviceCeilings, cpu_ceilings, gpu_ceilings
from fasttrain.estimate.cost import ModelCost, OpCost
from fasttrain.estimate.forecast import LoaderSample, forecast
from fasttrain.estimate.gather import gpu_report
from fasttrain.estimate.memory import memory_budget, optimizer_state_bytes
from fasttrain.estimate.roofline import Ceilings, OpTable, step_time
from fasttrain.hardware.gpus import get_gpu
from fasttrain.plan import make_plan
from fasttrain.profiles import presets

MIB = 2**20
CONSTANTS = {"cuda_context_bytes": 100 * MIB, "workspace_bytes": 100 * MIB, "allocator_overhead": 1.0,
             "autocast_weight_copy_bytes_per_param": 2, "process_overhead_bytes_gpu": 1000 * MIB,
             "process_overhead_bytes_cpu": 500 * MIB, "worker_overhead_bytes": 100 * MIB}
# one compute-heavy op (a conv) and one pointwise op (batch norm): FLOPs and bytes per sample
OPS = [OpCost("convolution", flops_per_sample=1e9, bytes_per_sample=1e6, fixed_bytes=0.0),
       OpCost("batch_norm", flops_per_sample=0.0, bytes_per_sample=4e7, fixed_bytes=0.0)]
CEIL = Ceilings(peak_flops=1e12, bandwidth=1e11, compute_efficiency=0.5, memory_efficiency=0.5)


def _cost(ops=OPS, params=1_000_000, act=1e6) -> ModelCost:
    return ModelCost(model="hand", image_size=32, num_classes=10, dtype="float32", params=params,
                     param_bytes=4 * params, forward_flops_per_sample=1e9 / 3, train_flops_per_sample=1e9,
                     activation_bytes_per_sample=act, ops=list(ops))


def _device(ceilings=CEIL, memory=10 * 2**30, unknown=()) -> DeviceCeilings:
    return DeviceCeilings("Hand GPU", "gpu", ceilings, 1e12 if ceilings else None, memory, list(unknown),
                          "fp32-nchw", 0.9, "test")


def _plan(sets=(), gpu="A100 80GB"):
    prof = presets.resolve("kaggle-t4", sets=["loader.batch_size=10", "speed.precision=fp32", "speed.compile=false",
                                              "optim.optimizer=sgd", *sets]).profile
    spec = get_gpu(gpu)
    return make_plan(prof, gpu_report(prof, spec, spec.memory_bytes)), prof


def test_roofline_prices_each_op_at_its_own_roof() -> None:
    t = step_time(OpTable.from_ops(OPS), batch=10, c=CEIL, params=0)
    conv = max(10 * 1e9 / (1e12 * 0.5), 10 * 1e6 / (1e11 * 0.5))   # 0.02 s at the FLOP roof
    bn = 10 * 4e7 / (1e11 * 0.5)                                    # 0.008 s at the bandwidth roof
    assert t.compute_bound_s == pytest.approx(conv) and t.memory_bound_s == pytest.approx(bn)
    assert t.seconds == pytest.approx(conv + bn) and t.limiter == "compute"
    slow_memory = Ceilings(peak_flops=1e12, bandwidth=1e10, compute_efficiency=0.5, memory_efficiency=0.5)
    assert step_time(OpTable.from_ops(OPS), 10, slow_memory).limiter == "memory bandwidth"


def test_optimizer_traffic_overhead_and_compile() -> None:
    table = OpTable.from_ops(OPS)
    base = step_time(table, 10, CEIL, params=1000, optimizer="sgd", momentum=True)
    # SGD momentum: read p, g, m and write p, m: 5 x 4 bytes per parameter, streamed at 0.8 of the bandwidth
    assert base.optimizer_s == pytest.approx(1000 * 4 * 5 / (1e11 * 0.8))
    assert step_time(table, 10, CEIL, params=1000, optimizer="adamw").optimizer_s == pytest.approx(
        1000 * 4 * 7 / (1e11 * 0.8))
    # autocast adds a half-precision cast of every weight per forward: read 4 + write 2 bytes
    assert step_time(table, 10, CEIL, params=1000, mixed_precision=True).optimizer_s == pytest.approx(
        1000 * (4 * 5 + 6) / (1e11 * 0.8))
    with_overhead = Ceilings(**{**CEIL.__dict__, "op_overhead_s": 1e-3})
    assert step_time(table, 10, with_overhead).overhead_s == pytest.approx(2e-3)
    fused = Ceilings(**{**CEIL.__dict__, "compile_pointwise_bytes": 0.5})
    assert step_time(table, 10, fused, compiled=True).memory_bound_s == pytest.approx(0.004)


def test_optimizer_state_by_optimizer() -> None:
    assert optimizer_state_bytes(1000, "sgd", 0.9) == 4000
    assert optimizer_state_bytes(1000, "sgd", 0.0) == 0
    assert optimizer_state_bytes(1000, "adam", 0.9) == optimizer_state_bytes(1000, "adamw", 0.9) == 8000


def test_memory_budget_and_largest_batch() -> None:
    gib = 2**30
    m = memory_budget(params=10_000_000, activation_bytes_per_sample=50 * MIB, batch=64, precision="fp16-mixed",
                      optimizer="adamw", momentum=0.9, capacity=8 * gib, constants=CONSTANTS)
    assert (m.weights, m.gradients, m.optimizer_state, m.autocast_copies) == (4e7, 4e7, 8e7, 2e7)
    assert m.activations == 64 * 50 * MIB and m.workspace == 200 * MIB
    assert m.total == 18e7 + 64 * 50 * MIB + 200 * MIB and m.fits
    assert m.largest_batch == math.floor((8 * gib - 18e7 - 200 * MIB) / (50 * MIB))   # 154
    tight = memory_budget(10_000_000, 50 * MIB, 200, "fp32", "sgd", 0.9, 8 * gib, CONSTANTS)
    assert not tight.fits and tight.largest_batch < 200
    assert memory_budget(10, 1.0, 1, "fp32", "sgd", 0.9, None, CONSTANTS).fits is None


def test_forecast_time_cost_and_mfu() -> None:
    plan, prof = _plan(["hardware.price_on_demand_per_hour=3.6", "hardware.price_spot_per_hour=1.8"])
    fc = forecast(plan, prof, _cost(), _device(), dataset_size=1005, epochs=2, host_ram_bytes=64 * 2**30,
                  constants=CONSTANTS)
    step = 0.02 + 0.008 + 1e6 * 4 * 5 / 8e10          # conv + batch norm + SGD momentum update
    assert fc.schedule["iterations_per_epoch"] == 100     # floor(1005 / 10), drop_last
    assert fc.speed["step_time_s"] == pytest.approx(step)
    assert fc.speed["images_per_s"] == pytest.approx(10 / step)
    assert fc.time["epoch_s"] == pytest.approx(100 * step) and fc.time["total_s"] == pytest.approx(200 * step)
    assert fc.speed["mfu"] == pytest.approx(1e9 * (10 / step) / 1e12)
    assert fc.cost["on_demand_per_epoch"] == pytest.approx(100 * step / 3600 * 3.6)
    assert fc.cost["spot_per_run"] == pytest.approx(200 * step / 3600 * 1.8)
    assert fc.bottleneck["name"] == "compute"
    assert fc.bottleneck["evidence"].startswith(
        f"step time: {0.02 / step:.0%} at the FLOP roof, {(0.008 + 1e6 * 20 / 8e10) / step:.0%}"
    )
    assert fc.unknown == ["data loading speed (give --data DIR to measure it)"]


def test_multi_gpu_plan_scales_batch_iterations_and_throughput() -> None:
    plan, prof = _plan(["world.gpus_per_node=4"])
    fc = forecast(
        plan, prof, _cost(), _device(), dataset_size=1005, epochs=1, host_ram_bytes=64 * 2**30, constants=CONSTANTS
    )
    assert fc.schedule["world_size"] == 4 and fc.schedule["effective_batch"] == 40
    assert fc.schedule["iterations_per_epoch"] == 25
    assert fc.speed["images_per_s"] == pytest.approx(fc.speed["images_per_s_per_device"] * 4 * 0.9)
    assert fc.schedule["scaled_lr"] == pytest.approx(prof.optim.base_lr * 40 / prof.optim.base_batch)
    assert fc.loader["total_workers"] == 4 * plan.workers


def test_slow_loader_makes_data_loading_the_bottleneck() -> None:
    plan, prof = _plan()
    fc = forecast(
        plan,
        prof,
        _cost(),
        _device(),
        1000,
        1,
        64 * 2**30,
        CONSTANTS,
        loader=LoaderSample(images_per_s_per_worker=20.0, source="test"),
    )
    assert fc.bottleneck["name"] == "data loading"
    assert fc.speed["images_per_s_per_device"] == pytest.approx(20.0 * plan.workers)
    assert fc.loader["keeps_up"] is False
    assert fc.loader["workers_needed"] == math.ceil(fc.speed["compute_only_images_per_s"] / 20.0)
    fast = forecast(
        plan,
        prof,
        _cost(),
        _device(),
        1000,
        1,
        64 * 2**30,
        CONSTANTS,
        loader=LoaderSample(images_per_s_per_worker=1e6, source="test"),
    )
    assert fast.bottleneck["name"] == "compute" and fast.loader["keeps_up"] is True


def test_too_little_host_ram_is_the_bottleneck() -> None:
    plan, prof = _plan()
    fc = forecast(plan, prof, _cost(), _device(), 1000, 1, host_ram_bytes=512 * MIB, constants=CONSTANTS)
    assert fc.bottleneck["name"] == "host RAM" and not fc.host_ram.fits


def test_unknown_peaks_give_no_number_and_say_what_is_missing(monkeypatch) -> None:
    monkeypatch.setattr("fasttrain.hardware.gpus._standins", dict)  # the A10G without its stand-in's peaks
    plan, prof = _plan(gpu="A10G")
    dev = gpu_ceilings(get_gpu("A10G"), plan.precision, plan.tf32, plan.channels_last)
    assert dev.ceilings is None and dev.unknown == [
        "fp32_tflops of A10G (AWS g5)",
        "tf32_tflops_dense of A10G (AWS g5)",
    ]
    fc = forecast(plan, prof, _cost(), dev, 1000, 1, 64 * 2**30, CONSTANTS)
    assert fc.speed["images_per_s"] is None and fc.time["total_s"] is None and fc.speed["mfu"] is None
    assert fc.cost["on_demand_per_run"] is None
    assert fc.bottleneck["name"] == "unknown" and "fp32_tflops" in fc.bottleneck["evidence"]
    assert fc.memory.fits is True  # VRAM is known, so the memory verdict still stands


def test_gpu_ceilings_follow_precision_layout_and_tf32() -> None:
    a100 = get_gpu("A100 80GB")
    amp_cl = gpu_ceilings(a100, "fp16-mixed", tf32=True, channels_last=True)
    amp_nchw = gpu_ceilings(a100, "fp16-mixed", tf32=True, channels_last=False)
    assert amp_cl.group == "amp-channels_last" and amp_cl.peak_flops == 312e12
    # NCHW under autocast pays a transpose around each convolution; channels_last does not
    assert amp_nchw.ceilings.conv_layout_bytes > 0 and amp_cl.ceilings.conv_layout_bytes == 0
    assert gpu_ceilings(a100, "fp32", tf32=True, channels_last=False).group == "tf32-nchw"
    assert gpu_ceilings(get_gpu("V100"), "fp32", tf32=True, channels_last=False).group == "fp32-nchw"
    # grouped convolutions run on CUDA cores whatever the precision: the fp32 peak, not the tensor-core one
    assert amp_cl.ceilings.depthwise_peak_flops == pytest.approx(19.5e12)


def test_fp32_plans_run_convolutions_in_tf32_on_ampere_and_newer_only() -> None:
    """PyTorch's cudnn.allow_tf32 is on by default: an fp32 plan on an A100 has TF32 convolutions even with the
    matmul tf32 flag off; a V100 has no TF32 and stays at its fp32 peak."""
    fp32 = gpu_ceilings(get_gpu("A100 80GB"), "fp32", tf32=False, channels_last=False).ceilings
    assert fp32.peak_flops == pytest.approx(19.5e12) and fp32.conv_peak_flops == pytest.approx(156e12)
    v100 = gpu_ceilings(get_gpu("V100"), "fp32", tf32=False, channels_last=False).ceilings
    assert v100.conv_peak_flops == pytest.approx(15.7e12)
    table = OpTable.from_ops([OpCost("convolution", 1e9, 0.0, 0.0), OpCost("mm", 1e9, 0.0, 0.0)])
    t = step_time(table, 10, fp32)
    conv_s, mm_s = 1e10 / (156e12 * fp32.conv_efficiency), 1e10 / (19.5e12 * fp32.compute_efficiency)
    assert t.compute_bound_s == pytest.approx(conv_s + mm_s)


def test_nchw_layout_traffic_is_added_to_dense_convolutions_only() -> None:
    ops = [OpCost("convolution", 0.0, 1e6, 0.0), OpCost("batch_norm", 0.0, 1e6, 0.0)]
    base = step_time(OpTable.from_ops(ops), 10, CEIL)
    nchw = step_time(OpTable.from_ops(ops), 10, Ceilings(**{**CEIL.__dict__, "conv_layout_bytes": 1.5}))
    assert nchw.memory_bound_s - base.memory_bound_s == pytest.approx(10 * 1e6 * 1.5 / (1e11 * 0.5))
    cpu = cpu_ceilings(1e11, 1e10, 2**30)
    assert cpu.kind == "cpu" and cpu.ceilings.peak_flops == 1e11 and not cpu.unknown


def test_cpu_conv_weight_cost_adds_per_weight_byte_to_dense_convolutions_only() -> None:
    ops = [
        OpCost("convolution", flops_per_sample=1e9, bytes_per_sample=1e6, fixed_bytes=1e6),
        OpCost("convolution_backward", flops_per_sample=2e9, bytes_per_sample=1e6, fixed_bytes=2e6),
        OpCost("convolution", flops_per_sample=1e6, bytes_per_sample=1e6, fixed_bytes=1e6, depthwise=True),
        OpCost("mm", flops_per_sample=1e6, bytes_per_sample=1e3, fixed_bytes=1e6),
    ]
    table = OpTable.from_ops(ops)
    assert table.conv.tolist() == [True, True, False, False]
    base = step_time(table, 10, CEIL)
    priced = step_time(table, 10, Ceilings(**{**CEIL.__dict__, "conv_weight_s_per_byte": 1e-9}))
    # the forward's weight bytes (1e6) + the backward's (2e6) at 1 ns per byte: 3 ms, whatever the batch
    assert priced.seconds - base.seconds == pytest.approx(3e-3)
    assert step_time(table, 100, Ceilings(**{**CEIL.__dict__, "conv_weight_s_per_byte": 1e-9})).seconds - step_time(
        table, 100, CEIL
    ).seconds == pytest.approx(3e-3)
    cpu = cpu_ceilings(1e11, 1e10, 2**30, conv_weight_s_per_byte=1e-9)
    assert cpu.ceilings.conv_weight_s_per_byte == 1e-9
    assert (
        gpu_ceilings(get_gpu("A100 80GB"), "fp32", tf32=False, channels_last=False).ceilings.conv_weight_s_per_byte
        == 0.0
    )  # the published GPU fit holds this cost in its efficiencies


def test_conv_weight_cost_is_the_time_flops_do_not_explain_per_weight_byte() -> None:
    from fasttrain.estimate.cpu_ceiling import conv_weight_cost

    # 2 ms for 1e8 FLOPs at 1e11 FLOP/s (1 ms of FLOPs) over 1e6 weight bytes: 1 ns per byte
    assert conv_weight_cost(2e-3, 1e8, 1e11, 1e6) == pytest.approx(1e-9)
    assert conv_weight_cost(0.5e-3, 1e8, 1e11, 1e6) == 0.0  # faster than the big conv: no extra cost


def test_depthwise_backward_can_run_at_its_own_efficiency() -> None:
    ops = [
        OpCost("convolution", flops_per_sample=1e6, bytes_per_sample=0.0, fixed_bytes=0.0, depthwise=True),
        OpCost("convolution_backward", flops_per_sample=2e6, bytes_per_sample=0.0, fixed_bytes=0.0, depthwise=True),
    ]
    table = OpTable.from_ops(ops)
    same = Ceilings(**{**CEIL.__dict__, "depthwise_efficiency": 0.1})
    split = Ceilings(**{**CEIL.__dict__, "depthwise_efficiency": 0.1, "depthwise_backward_efficiency": 0.01})
    # forward 1e7 FLOPs at 1e12 x 0.5 x 0.1; backward 2e7 FLOPs at 0.1 (GPUs) or 0.01 (the CPU's split)
    assert step_time(table, 10, same).seconds == pytest.approx(1e7 / 5e10 + 2e7 / 5e10)
    assert step_time(table, 10, split).seconds == pytest.approx(1e7 / 5e10 + 2e7 / 5e9)
