"""models/one_pixel.py: a convolution with a one-pixel output as a matrix product, the same as the convolution."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from loop_helpers import cpu_plan  # noqa: E402

from fasttrain.models.one_pixel import OnePixelConv2d, one_pixel_taps, to_one_pixel  # noqa: E402


@pytest.mark.parametrize(("in_hw", "kernel", "stride", "padding", "want"), [
    ((1, 1), (3, 3), (1, 1), (1, 1), ((1, 2), (1, 2))),   # resnet18's layer4 at 32 px: the centre tap
    ((2, 2), (3, 3), (2, 2), (1, 1), ((1, 3), (1, 3))),   # layer4's first conv: 2x2 -> 1x1, stride 2
    ((2, 2), (3, 3), (1, 1), (1, 1), None),               # a 2x2 output: every tap meets real input somewhere
    ((4, 4), (3, 3), (4, 4), (1, 1), ((1, 3), (1, 3))),   # input rows 0-1 meet taps 1-2; rows 2-3 never read
    ((1, 3), (3, 3), (1, 1), (1, 1), None),               # 1 x 3 output
    ((2, 2), (2, 2), (1, 1), (0, 0), ((0, 2), (0, 2))),   # no padding: the whole kernel, the whole input
    ((1, 1), (5, 5), (1, 1), (2, 2), ((2, 3), (2, 3))),
])
def test_taps_that_meet_real_input(in_hw, kernel, stride, padding, want):
    assert one_pixel_taps(in_hw, kernel, stride, padding, (1, 1)) == want


def test_a_dilated_convolution_keeps_its_own_path():
    assert one_pixel_taps((1, 1), (3, 3), (1, 1), (2, 2), (2, 2)) is None


def _pair(conv: torch.nn.Conv2d) -> tuple[torch.nn.Conv2d, torch.nn.Conv2d]:
    other = torch.nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                            bias=conv.bias is not None)
    other.load_state_dict(conv.state_dict())
    other.__class__ = OnePixelConv2d
    return conv, other


@settings(max_examples=60, deadline=None)
@given(size=st.tuples(st.integers(1, 5), st.integers(1, 5)), kernel=st.integers(1, 4), stride=st.integers(1, 5),
       padding=st.integers(0, 2), bias=st.booleans(), channels_last=st.booleans(), seed=st.integers(0, 2**16))
def test_same_outputs_and_gradients_as_the_convolution(size, kernel, stride, padding, bias, channels_last, seed):
    """Whatever the input size (one-pixel output or not), values and both gradients match nn.Conv2d's."""
    if any(s + 2 * padding < kernel for s in size):
        return  # no output at all: nn.Conv2d refuses it, and so must we (tested below)
    torch.manual_seed(seed)
    plain, fast = _pair(torch.nn.Conv2d(4, 6, kernel, stride, padding, bias=bias))
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x = torch.randn(3, 4, *size).to(memory_format=fmt)
    outs, grads = [], []
    for conv in (plain, fast):
        conv.zero_grad()
        xi = x.clone().requires_grad_(True)
        out = conv(xi)
        (out * torch.arange(out.numel()).view_as(out).sin()).sum().backward()  # an uneven upstream gradient
        outs.append(out)
        grads.append((xi.grad, conv.weight.grad, conv.bias.grad if bias else None))
    assert outs[1].shape == outs[0].shape
    torch.testing.assert_close(outs[1], outs[0], rtol=1e-5, atol=1e-5)
    for mine, theirs in zip(grads[1], grads[0], strict=True):
        if theirs is not None:
            torch.testing.assert_close(mine, theirs, rtol=1e-5, atol=1e-5)


def test_an_input_smaller_than_the_kernel_still_fails_as_the_convolution_does():
    plain, fast = _pair(torch.nn.Conv2d(2, 2, 3))
    x = torch.randn(1, 2, 1, 1)
    with pytest.raises(RuntimeError):
        plain(x)
    with pytest.raises(RuntimeError):
        fast(x)


def test_resnet18_at_32px_trains_the_same_and_saves_the_same():
    """timm's resnet18 at 32 px (layer4 runs on 2x2 and 1x1 maps): the converted model has the same state_dict,
    the same outputs and the same gradients, and it converts only plain ungrouped convolutions with a kernel."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    plain = timm.create_model("resnet18", num_classes=5)
    fast = timm.create_model("resnet18", num_classes=5)
    fast.load_state_dict(plain.state_dict())
    turned = to_one_pixel(fast)
    assert turned == 17  # the stem's 7x7 and 16 3x3 convolutions; the 3 strided 1x1 downsamples stay
    assert list(fast.state_dict()) == list(plain.state_dict())
    assert sum(isinstance(m, OnePixelConv2d) for m in fast.modules()) == turned
    x = torch.randn(4, 3, 32, 32)
    y = torch.tensor([0, 1, 2, 3])
    for model in (plain, fast):
        torch.nn.functional.cross_entropy(model(x), y).backward()
    torch.testing.assert_close(fast(x), plain(x), rtol=1e-4, atol=1e-4)
    for (name, a), (_, b) in zip(fast.named_parameters(), plain.named_parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-3, atol=1e-5, msg=name)
    # a converted model's weights load into a fresh, unconverted one (what `predict` and checkpoints rely on)
    fresh = timm.create_model("resnet18", num_classes=5).eval()
    fresh.load_state_dict(fast.state_dict())
    torch.testing.assert_close(fresh(x), fast.eval()(x))


def test_subclasses_and_grouped_convolutions_are_left_alone():
    class Same(torch.nn.Conv2d):  # a padding variant of its own (timm's Conv2dSame is one)
        pass
    model = torch.nn.Sequential(Same(3, 3, 3), torch.nn.Conv2d(4, 4, 3, groups=4), torch.nn.Conv2d(3, 3, 1))
    assert to_one_pixel(model) == 0
    assert [type(m) for m in model] == [Same, torch.nn.Conv2d, torch.nn.Conv2d]


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_a_convolution_padded_by_name_runs_as_the_convolution_does(padding):
    """nn.Conv2d keeps padding="same"/"valid" as the string: converted, its forward once raised TypeError (int +
    str) on any input, so a CPU run of a model with such a layer failed at its first step."""
    from fasttrain.models.setup import prepare_model

    plan, _ = cpu_plan()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=padding), torch.nn.Flatten())
    reference = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=padding), torch.nn.Flatten())
    reference.load_state_dict(model.state_dict())
    _module, run, _ = prepare_model(model, plan, activation_checkpointing=False, warn=lambda text: None)
    x = torch.randn(2, 3, 3, 3)
    torch.testing.assert_close(run(x), reference(x))


def test_prepare_model_converts_on_the_cpu_and_says_so():
    from fasttrain.models.setup import prepare_model

    plan, _ = cpu_plan()
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Flatten())
    module, _, notes = prepare_model(model, plan, activation_checkpointing=False, warn=lambda text: None)
    assert isinstance(module[0], OnePixelConv2d)
    assert any(n.startswith("CPU convolutions: ") for n in notes)
    linear_only = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3, 2))
    _, _, notes = prepare_model(linear_only, plan, activation_checkpointing=False, warn=lambda text: None)
    assert not any(n.startswith("CPU convolutions: ") for n in notes)


def test_the_gradient_comes_back_in_the_weights_own_layout():
    """What the kernel's gradient arrives as (a hook sees it before the accumulator): laid out like the channels_last
    weight, so no copy into that layout follows (plain slicing hands back a contiguous tensor)."""
    conv = torch.nn.Conv2d(8, 4, 3, padding=1).to(memory_format=torch.channels_last)
    conv.__class__ = OnePixelConv2d
    arrived = []
    conv.weight.register_hook(lambda grad: arrived.append(grad.stride()))
    conv(torch.randn(2, 8, 1, 1).to(memory_format=torch.channels_last)).sum().backward()
    assert arrived == [conv.weight.stride()] and conv.weight.stride() != conv.weight.contiguous().stride()
    assert conv.weight.grad.abs().sum() > 0
    untouched = torch.ones(3, 3, dtype=torch.bool)
    untouched[1, 1] = False
    assert not conv.weight.grad[:, :, untouched].any()  # the taps that only meet padding: a gradient of zero


def test_to_plain_hands_the_classes_back():
    from fasttrain.models.one_pixel import to_plain
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Conv2d(4, 4, 1))
    assert to_one_pixel(model) == 1 and type(model[0]) is OnePixelConv2d
    assert to_plain(model) == 1 and [type(m) for m in model] == [torch.nn.Conv2d, torch.nn.Conv2d]
