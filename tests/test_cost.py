"""Model cost on the meta device: FLOPs checked by hand, saved-activation bytes, bad sizes and names."""
from __future__ import annotations

import textwrap

import pytest

from fasttrain.core.errors import UserError
from fasttrain.estimate import cost

NETS = """
import torch.nn as nn

def conv_linear(num_classes=10):
    # conv 3->8, 3x3, pad 1, no bias on 16x16, then a linear layer on the flattened 8x16x16 map.
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.Flatten(), nn.Linear(8 * 16 * 16, num_classes))

def depthwise(num_classes=10):
    return nn.Sequential(nn.Conv2d(3, 16, 1, bias=False), nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, num_classes))
"""


@pytest.fixture
def nets(tmp_path, monkeypatch):
    (tmp_path / "handnets.py").write_text(textwrap.dedent(NETS))
    monkeypatch.syspath_prepend(str(tmp_path))
    return "handnets"


def test_flops_of_a_known_conv_and_linear_match_the_hand_count(nets) -> None:
    c = cost.model_cost(f"{nets}:conv_linear", image_size=16, num_classes=10)
    conv = 2 * (8 * 16 * 16) * (3 * 3 * 3)          # 2 x outputs x (Cin x k x k) = 110,592
    linear = 2 * (8 * 16 * 16) * 10                 # 2 x in x out = 40,960
    assert c.forward_flops_per_sample == conv + linear
    # backward: the conv needs only grad_weight (its input needs no grad), the linear grad_input + grad_weight
    assert c.train_flops_per_sample == (conv + linear) + conv + 2 * linear
    assert c.params == 8 * 3 * 3 * 3 + 8 * 16 * 16 * 10 + 10
    assert c.param_bytes == 4 * c.params


def test_saved_activation_bytes_are_counted_per_sample_and_exclude_weights(nets) -> None:
    c = cost.model_cost(f"{nets}:conv_linear", image_size=16, num_classes=10)
    # the conv saves its input (3x16x16 fp32); the linear saves its input (the 8x16x16 conv output)
    assert c.activation_bytes_per_sample == 4 * (3 * 16 * 16 + 8 * 16 * 16)
    assert c.activation_bytes_by_dtype == {"float32": c.activation_bytes_per_sample}


def test_half_precision_halves_activation_bytes_and_keeps_flops(nets) -> None:
    fp32 = cost.model_cost(f"{nets}:conv_linear", image_size=16, num_classes=10)
    fp16 = cost.model_cost(f"{nets}:conv_linear", image_size=16, num_classes=10, precision="fp16-mixed")
    assert fp16.activation_bytes_per_sample == fp32.activation_bytes_per_sample / 2
    assert fp16.train_flops_per_sample == fp32.train_flops_per_sample
    assert fp16.dtype == "float16" and fp16.param_bytes == fp32.param_bytes  # master weights stay fp32


def test_grouped_conv_backward_is_priced_like_its_forward(nets) -> None:
    c = cost.model_cost(f"{nets}:depthwise", image_size=8, num_classes=10)
    pointwise = 2 * 16 * 8 * 8 * 3
    dw = 2 * 16 * 8 * 8 * 9                         # groups=16: each output sees 1 channel x 3 x 3
    linear = 2 * 16 * 10
    assert c.forward_flops_per_sample == pointwise + dw + linear
    # flop_counter alone prices the depthwise grad_weight as a dense conv (16x too much)
    assert c.train_flops_per_sample == 3 * c.forward_flops_per_sample - pointwise
    assert any(op.depthwise for op in c.ops)


def test_op_table_splits_per_sample_and_fixed_bytes() -> None:
    c = cost.model_cost("tiny_cnn", image_size=16, num_classes=10)
    convs = [op for op in c.ops if op.name == "convolution"]
    assert len(convs) == 4
    first = convs[0]   # 3->32 conv on 16x16: input 3x16x16, output 32x16x16 fp32 per sample; weight is fixed
    assert first.bytes_per_sample == 4 * (3 + 32) * 16 * 16
    assert first.fixed_bytes == 4 * 32 * 3 * 3 * 3
    assert sum(op.flops_per_sample for op in c.ops) == pytest.approx(c.train_flops_per_sample)


def test_meta_count_matches_a_real_cpu_forward() -> None:
    meta = cost.model_cost("tiny_cnn", image_size=16, num_classes=10).activation_bytes_per_sample
    real = cost.measured_saved_bytes("tiny_cnn", image_size=16, batch=4, num_classes=10)
    assert meta == pytest.approx(real, rel=0.05)


def test_torchvision_model_on_meta_has_no_real_weights() -> None:
    model = cost.build_model("resnet18", num_classes=10)
    assert all(p.is_meta for p in model.parameters())
    c = cost.model_cost("resnet18", image_size=32, num_classes=10)
    assert 11e6 < c.params < 12e6
    assert 2.9 < c.train_flops_per_sample / c.forward_flops_per_sample < 3.1


def test_an_image_size_the_model_cannot_take_is_a_user_error(nets) -> None:
    with pytest.raises(UserError) as exc:
        cost.model_cost(f"{nets}:conv_linear", image_size=20, num_classes=10)   # the linear expects 16x16
    line = exc.value.lines()[0]
    assert line.startswith("--image-size:") and "conv_linear" in line and "20 px" in line


def test_unknown_model_name_suggests_close_matches() -> None:
    with pytest.raises(UserError) as exc:
        cost.model_cost("resnet5O", image_size=32)
    assert "did you mean" in exc.value.lines()[0] and "resnet50" in exc.value.lines()[0]
