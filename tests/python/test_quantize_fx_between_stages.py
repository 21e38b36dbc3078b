"""fuselage.quantize_fx between prepare_fx and convert_fx, and the quantized modules
convert_fx rebuilds (issue 19 item 5's speed work must not move correctness).

- A quantized conv is rebuilt without packing a placeholder weight first
  (fuselage._modules._construct_packed): it must equal PyTorch's own module built by its
  constructor + set_weight_bias — same fields, same weight and bias, same output.
- convert_fx reads the prepared GraphModule as it is when convert_fx is called: a user who
  edits it after prepare_fx (a weight changed in place, a parameter replaced, a module
  replaced) gets the edited model quantized. Expected values are computed independently:
  the converted weight must be PyTorch's torch.quantize_per_channel of the edited float
  weight (with the scales of PyTorch's own PerChannelMinMaxObserver on it), and the
  converted model's output must match a fresh, unedited-path conversion of an equivalent
  model built with the edits from the start.
"""
import copy

import torch
import torch.nn.intrinsic.quantized as nniq
import torch.ao.nn.quantized as nnq
import torch.nn as nn
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.backend_config import get_native_backend_config
from torch.ao.quantization.observer import PerChannelMinMaxObserver

from fuselage import _modules
from fuselage.quantize_fx import convert_fx, prepare_fx


def _quantized_weight(in_channels=4, out_channels=6, kernel=3):
    torch.manual_seed(3)
    w = torch.randn(out_channels, in_channels, kernel, kernel)
    scales = w.abs().amax(dim=(1, 2, 3)).double() / 127
    return torch.quantize_per_channel(w, scales, torch.zeros(out_channels, dtype=torch.long),
                                      0, torch.qint8)


def test_a_rebuilt_quantized_conv_equals_pytorchs_own():
    qweight = _quantized_weight()
    bias = torch.linspace(-1, 1, 6)
    attributes = {"in_channels": 4, "out_channels": 6, "kernel_size": (3, 3),
                  "stride": (2, 1), "padding": (1, 0), "dilation": (1, 1), "groups": 1,
                  "padding_mode": "zeros", "transposed": False, "output_padding": (0, 0),
                  "scale": 0.05, "zero_point": 3}
    for cls, type_name in ((nnq.Conv2d, "nnq.Conv2d"), (nniq.ConvReLU2d, "nniq.ConvReLU2d")):
        ours = _modules.build(type_name, {"weight": qweight, "bias": bias}, dict(attributes),
                              {}, "test module")
        theirs = cls(4, 6, 3, stride=(2, 1), padding=(1, 0))
        theirs.set_weight_bias(qweight, bias)
        theirs.scale, theirs.zero_point = 0.05, 3
        assert type(ours) is cls
        assert sorted(ours.__dict__) == sorted(theirs.__dict__)
        assert "set_weight_bias" not in ours.__dict__  # the stand-in is gone
        assert torch.equal(ours.weight().int_repr(), qweight.int_repr())
        assert torch.equal(ours.weight().q_per_channel_scales(), qweight.q_per_channel_scales())
        assert torch.equal(ours.bias(), bias)
        x = torch.quantize_per_tensor(torch.randn(1, 4, 7, 7), 0.1, 128, torch.quint8)
        assert torch.equal(ours(x).int_repr(), theirs(x).int_repr())


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.relu = nn.ReLU()
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.head(self.relu(self.conv(x)))


def _net():
    torch.manual_seed(0)
    return Net().eval()


def _calibrate(prepared, batches):
    with torch.no_grad():
        for x in batches:
            prepared(x)


def _prepare_and_calibrate(model, batches):
    """prepare_fx, then the batches run through the prepared model (none: uncalibrated)."""
    prepared = prepare_fx(model, get_default_qconfig_mapping("fbgemm"),
                          (torch.randn(1, 3, 8, 8),), backend_config=get_native_backend_config())
    _calibrate(prepared, batches)
    return prepared


def _batches():
    g = torch.Generator().manual_seed(1)
    return [torch.randn(2, 3, 8, 8, generator=g) for _ in range(3)]


def _expected_weight(float_weight):
    """PyTorch's own per-channel quantization of `float_weight` (fbgemm's weight observer)."""
    observer = PerChannelMinMaxObserver(ch_axis=0, dtype=torch.qint8,
                                        qscheme=torch.per_channel_symmetric)
    observer(float_weight)
    scales, zero_points = observer.calculate_qparams()
    return torch.quantize_per_channel(float_weight, scales.double(), zero_points, 0, torch.qint8)


def _conv_weight(converted, path):
    return converted.get_submodule(path).weight()


def test_a_weight_edited_in_place_after_prepare_is_what_convert_quantizes():
    prepared = _prepare_and_calibrate(_net(), _batches())
    head = prepared.get_submodule("head")
    with torch.no_grad():
        head.weight.mul_(-2.0)  # in place: the same Parameter object, new values
        head.weight[0].zero_()
    edited = head.weight.detach().clone()
    converted = convert_fx(prepared)
    got = _conv_weight(converted, "head")
    expected = _expected_weight(edited)
    assert torch.equal(got.int_repr(), expected.int_repr())
    assert torch.allclose(got.q_per_channel_scales(), expected.q_per_channel_scales())


def test_a_parameter_replaced_after_prepare_is_what_convert_quantizes():
    prepared = _prepare_and_calibrate(_net(), _batches())
    torch.manual_seed(7)
    replacement = torch.randn(4, 8, 1, 1)
    prepared.get_submodule("head").weight = nn.Parameter(replacement.clone())
    converted = convert_fx(prepared)
    expected = _expected_weight(replacement)
    assert torch.equal(_conv_weight(converted, "head").int_repr(), expected.int_repr())


def test_a_module_replaced_after_prepare_is_converted_as_the_new_module():
    # The prepared model's `head` conv replaced by another (different weights, no bias)
    # before calibration must give the same converted model as preparing a model that
    # had that conv from the start: its observers see the same values either way.
    batches = _batches()
    torch.manual_seed(11)
    new_head = nn.Conv2d(8, 4, 1, bias=False).eval()

    edited = _prepare_and_calibrate(_net(), [])
    edited.head = copy.deepcopy(new_head)
    _calibrate(edited, batches)

    reference_model = _net()
    reference_model.head = copy.deepcopy(new_head)
    fresh = _prepare_and_calibrate(reference_model, batches)

    ours, theirs = convert_fx(edited), convert_fx(fresh)
    # The new conv has no bias (the replaced one had a random one); fuselage's lowering
    # gives a bias-less conv a zero bias where PyTorch keeps None: the same arithmetic.
    bias = ours.get_submodule("head").bias()
    assert bias is None or not bias.any()
    assert torch.equal(_conv_weight(ours, "head").int_repr(),
                       _conv_weight(theirs, "head").int_repr())
    x = torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        assert torch.equal(ours(x), theirs(x))
