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
