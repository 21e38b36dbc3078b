"""The Python front door under hostile input (issue 40): each case ends in one of
fuselage's error classes naming the entry, or behaves as PyTorch's own flow does."""

import pytest
import torch
import torch.nn as nn
from torch.ao.quantization import QConfig, QConfigMapping, get_default_qconfig_mapping
from torch.ao.quantization.backend_config import get_qnnpack_backend_config
from torch.ao.quantization.observer import FixedQParamsObserver, MinMaxObserver

import fuselage
from conftest import nested_pattern_config
from fuselage import _translate
from fuselage.quantize_fx import convert_fx, prepare_fx


def test_a_pattern_nested_two_thousand_deep_is_refused_naming_its_entry():
    pattern = nn.ReLU
    for _ in range(2000):
        pattern = (nn.ReLU, pattern)
    config = get_qnnpack_backend_config().set_backend_pattern_config(
        nested_pattern_config(pattern))
    with pytest.raises(fuselage.ConfigTranslationError,
                       match=r"backend pattern config \[\d+\]: the pattern has more than 64"):
        _translate.backend_config_to_text(config)


def test_a_module_name_with_a_lone_surrogate_is_refused_by_name():
    mapping = get_default_qconfig_mapping("qnnpack").set_module_name("layer\udcff", None)
    with pytest.raises(fuselage.ConfigTranslationError, match="lone surrogate"):
        _translate.qconfig_mapping_to_text(mapping)


def test_a_fixed_qparams_observer_with_a_nan_scale_names_its_entry():
    qconfig = QConfig(activation=FixedQParamsObserver.with_args(scale=float("nan"), zero_point=0),
                      weight=MinMaxObserver.with_args(dtype=torch.qint8))
    mapping = QConfigMapping().set_object_type(torch.sigmoid, qconfig)
    with pytest.raises(fuselage.ConfigTranslationError,
                       match=r"object_type\[0\].*FixedQParamsObserver argument scale=nan"):
        _translate.qconfig_mapping_to_text(mapping)


@pytest.mark.parametrize("mapping", ["empty", "global None"])
def test_a_mapping_that_quantizes_nothing_warns_why_and_converts_to_the_float_model(mapping):
    # PyTorch's convert_fx returns such a model float; fuselage said "not a prepared model".
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    qconfig_mapping = QConfigMapping() if mapping == "empty" else \
        get_default_qconfig_mapping("qnnpack").set_global(None)
    with pytest.warns(UserWarning, match=r"quantize no op.*nni\.ConvReLU2d.*qconfig is None"):
        prepared = prepare_fx(model, qconfig_mapping, (x,))
    prepared(x)
    converted = convert_fx(prepared)
    with torch.no_grad():
        assert torch.equal(converted(x), model(x))


class _Twice(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(self.fc(x))


class _Aliased(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = self.a

    def forward(self, x):
        return self.b(self.a(x))


def _quantized_linears(converted):
    import torch.nn.quantized as nnq
    return [m for m in converted.modules() if type(m) is nnq.Linear]


@pytest.mark.parametrize("model", [_Twice, _Aliased], ids=["called twice", "aliased"])
def test_a_module_called_twice_quantizes_each_call_with_its_own_output_scale(model):
    # Before: one call site became nnq.Linear and the other ran it on float input
    # ("Could not run 'quantized::linear' ...").
    torch.manual_seed(0)
    float_model = model().eval()
    x = torch.randn(64, 4) * 3
    prepared = prepare_fx(float_model, get_default_qconfig_mapping("qnnpack"), (x,))
    prepared(x)
    converted = convert_fx(prepared)
    linears = _quantized_linears(converted)
    assert len(linears) == 2  # one per call, the same weight
    assert torch.equal(linears[0].weight().int_repr(), linears[1].weight().int_repr())
    # Each call's output scale is its own range's (the first call's range differs).
    assert linears[0].scale != linears[1].scale
    with torch.no_grad():
        want, got = float_model(x), converted(x)
    assert float((got - want).abs().max()) <= 3 * linears[1].scale


def test_a_negative_weight_channel_axis_converts_to_a_model_that_runs():
    # A linear's ch_axis=-1 is its input features: PyTorch's convert fails on it, fuselage
    # ran the reference module into "Channel axis out of range". Now the axis is stored
    # non-negative and the op stays a reference module (no native linear quantizes along
    # input features), quantized per input feature.
    from torch.ao.quantization.observer import HistogramObserver, PerChannelMinMaxObserver
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5)).eval()
    x = torch.randn(32, 4)
    qconfig = QConfig(activation=HistogramObserver.with_args(reduce_range=False),
                      weight=PerChannelMinMaxObserver.with_args(
                          dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=-1))
    mapping = get_default_qconfig_mapping("qnnpack").set_object_type(nn.Linear, qconfig)
    prepared = prepare_fx(model, mapping, (x,))
    prepared(x)
    converted = convert_fx(prepared)
    reference = converted.get_submodule("0")
    assert int(reference.weight_axis) == 1 and reference.weight_scale.shape == (4,)
    # Per input feature j the weight's scale is max |w[:, j]| / 127.5 (symmetric qint8).
    expected = model[0].weight.detach().abs().amax(dim=0) * 2 / 255
    assert torch.allclose(reference.weight_scale.float(), expected, rtol=1e-6)
    with torch.no_grad():
        assert float((converted(x) - model(x)).abs().max()) < 0.05
