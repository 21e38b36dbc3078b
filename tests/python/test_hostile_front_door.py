"""The Python front door under hostile input (issue 40): each case ends in one of
fuselage's error classes naming the entry, or behaves as PyTorch's own flow does."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.ao.quantization import QConfig, QConfigMapping, get_default_qconfig_mapping
from torch.ao.quantization.backend_config import get_qnnpack_backend_config
from torch.ao.quantization.observer import FixedQParamsObserver, MinMaxObserver

import fuselage
from conftest import nested_pattern_config
from fuselage import _translate
from fuselage.quantize_fx import convert_fx, prepare_fx


@pytest.fixture(autouse=True)
def qnnpack_engine():
    """The cases use qnnpack's qconfigs (activations over the full quint8 range), which
    PyTorch's onednn linear (1.13's default engine here) does not compute exactly."""
    engine = torch.backends.quantized.engine
    torch.backends.quantized.engine = "qnnpack"
    yield
    torch.backends.quantized.engine = engine


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
    if mapping == "global None" and torch.__version__.startswith("1."):
        pytest.skip("PyTorch 1.13's default mapping keeps per-type qconfigs for Conv2d and "
                    "ReLU under set_global(None), so its prepare_fx observes the fused "
                    "conv-relu, and fuselage's does the same")
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


def _nothing_quantized_cases():
    from torch.ao.quantization import float16_static_qconfig
    from torch.ao.quantization.backend_config import BackendConfig
    weight = MinMaxObserver.with_args(dtype=torch.qint8)
    activation = {dtype: QConfig(activation=MinMaxObserver.with_args(dtype=dtype), weight=weight)
                  for dtype in (torch.quint8, torch.qint8, torch.qint32)}
    return {
        "float16 placeholder": (QConfigMapping().set_global(float16_static_qconfig), None),
        "qint32 activation": (QConfigMapping().set_global(activation[torch.qint32]), None),
        "qint8 activation on qnnpack": (QConfigMapping().set_global(activation[torch.qint8]),
                                        get_qnnpack_backend_config()),
        "empty BackendConfig": (QConfigMapping().set_global(activation[torch.quint8]),
                                BackendConfig()),
    }


@pytest.mark.parametrize("case", sorted(_nothing_quantized_cases()))
def test_a_config_no_op_accepts_warns_and_converts_to_the_float_model(case):
    # The other ways to quantize nothing: a dtype no dtype config accepts, a float16
    # placeholder, an empty BackendConfig. PyTorch returns the model float; so does fuselage.
    mapping, backend = _nothing_quantized_cases()[case]
    kwargs = {} if backend is None else {"backend_config": backend}
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    with pytest.warns(UserWarning, match=r"quantize no op, so convert_fx will return the "
                                         r"model float"):
        prepared = prepare_fx(model, mapping, (x,), **kwargs)
    prepared(x)
    converted = convert_fx(prepared, **kwargs)
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
    # MinMax: the error bound below holds for an unclipped range (the default mapping's
    # HistogramObserver clips it, by another rule on 1.13 than on 2.x).
    minmax = QConfig(activation=MinMaxObserver.with_args(dtype=torch.quint8),
                     weight=MinMaxObserver.with_args(dtype=torch.qint8,
                                                     qscheme=torch.per_tensor_symmetric))
    prepared = prepare_fx(float_model, QConfigMapping().set_global(minmax), (x,))
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
    from torch.ao.quantization.observer import PerChannelMinMaxObserver
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 5)).eval()
    x = torch.randn(32, 4)
    qconfig = QConfig(activation=MinMaxObserver.with_args(dtype=torch.quint8),
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


class _FunctionalConvReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 3, 3, 3))
        self.b = nn.Parameter(torch.randn(6))

    def forward(self, x):
        return F.relu(F.conv2d(x, self.w, self.b, (2, 1), (1, 0), (1, 1), 1))


class _FunctionalLinearReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 12))
        self.b = nn.Parameter(torch.randn(5))

    def forward(self, x):
        return F.relu(F.linear(x, self.w, self.b))


_FUNCTIONAL = {"F.conv2d + relu": (_FunctionalConvReLU, (2, 3, 9, 8)),
               "F.linear + relu": (_FunctionalLinearReLU, (16, 12))}


def _converted_output(converted, x):
    """The last quantized tensor of `converted` (before its final dequantize)."""
    graph = copy.deepcopy(converted.graph)
    output = next(n for n in graph.nodes if n.op == "output")
    output.args = (output.args[0].args[0],)
    with torch.no_grad():
        return torch.fx.GraphModule(converted, graph)(x)


@pytest.mark.parametrize("case", sorted(_FUNCTIONAL))
def test_a_functional_conv_or_linear_converts_to_pytorchs_packed_call(case):
    # Before: quantized::conv2d_relu() expected at most 4 argument(s) but received 7
    # (F.linear: 5 for 4) when the user ran the converted model.
    from torch.ao.quantization.quantize_fx import convert_fx as torch_convert_fx
    from torch.ao.quantization.quantize_fx import prepare_fx as torch_prepare_fx
    model_class, shape = _FUNCTIONAL[case]
    torch.manual_seed(0)
    model = model_class().eval()
    x = torch.randn(*shape)
    mapping = get_default_qconfig_mapping("qnnpack")
    ours = prepare_fx(model, mapping, (x,))
    theirs = torch_prepare_fx(copy.deepcopy(model), mapping, (x,))
    ours(x)
    theirs(x)
    ours, theirs = convert_fx(ours), torch_convert_fx(theirs)
    op = next(n for n in ours.graph.nodes if n.op == "call_function"
              and "relu" in str(n.target) and "quantized" in str(n.target))
    assert len(op.args) == 4 and not op.kwargs  # x, packed weight, scale, zero point
    assert isinstance(getattr(ours, op.args[1].target), torch._C.ScriptObject)
    got, want = _converted_output(ours, x), _converted_output(theirs, x)
    assert (got.q_scale(), got.q_zero_point()) == (want.q_scale(), want.q_zero_point())
    steps = (got.int_repr().int() - want.int_repr().int()).abs()
    assert int(steps.max()) <= 1 and float((steps == 0).float().mean()) >= 0.99


@pytest.mark.parametrize("case", sorted(_FUNCTIONAL))
def test_a_packed_functional_model_exports_and_runs_in_fuselage(case):
    # export unpacks PyTorch's packed form into tensors: fuselage's converted model and
    # PyTorch's own both go into a model file and run in fuselage as in PyTorch.
    from torch.ao.quantization.quantize_fx import convert_fx as torch_convert_fx
    from torch.ao.quantization.quantize_fx import prepare_fx as torch_prepare_fx
    from fuselage import _core
    model_class, shape = _FUNCTIONAL[case]
    torch.manual_seed(0)
    model = model_class().eval()
    x = torch.randn(*shape)
    mapping = get_default_qconfig_mapping("qnnpack")
    for prepare, convert in ((prepare_fx, convert_fx), (torch_prepare_fx, torch_convert_fx)):
        prepared = prepare(copy.deepcopy(model), mapping, (x,))
        prepared(x)
        converted = convert(prepared)
        step = _converted_output(converted, x).q_scale()
        with torch.no_grad():
            want = converted(x)
        got = torch.from_numpy(_core.run(_core.from_torch(converted, (x,)), [x.numpy()])[0])
        assert float((got - want).abs().max()) <= step * 1.001
        # The caller's model keeps its packed form.
        assert any(isinstance(v, torch._C.ScriptObject) for v in vars(converted).values())


# Found by test_hostile_property.py: each case below is one of its seeds, reduced.

def test_a_functional_weight_quantized_along_its_input_features_stays_a_reference_op():
    # Seed 511: a per-channel weight observer with ch_axis=-1 on F.linear's weight gave a
    # quantized::linear packed with per-input-feature scales, read as per-output-channel
    # ones: 28x PyTorch's error, silently. The op now stays dequantize -> F.linear.
    from torch.ao.quantization.observer import PerChannelMinMaxObserver
    torch.manual_seed(0)
    model = _FunctionalLinearReLU().eval()
    x = torch.randn(16, 12)
    qconfig = QConfig(activation=MinMaxObserver.with_args(dtype=torch.quint8),
                      weight=PerChannelMinMaxObserver.with_args(
                          dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=-1))
    prepared = prepare_fx(model, QConfigMapping().set_global(qconfig), (x,))
    prepared(x)
    converted = convert_fx(prepared)
    assert not any("quantized.linear" in str(n.target) for n in converted.graph.nodes)
    with torch.no_grad():
        want, got = model(x), converted(x)
    step = float(want.max()) / 255
    assert float((got - want).abs().max()) <= 8 * step


def test_an_uncalibrated_per_channel_observer_takes_its_first_batch():
    # Seed 110: a per-channel observer's empty min_val came from the engine's memory, which
    # PyTorch cannot resize_ ("Trying to resize storage that is not resizable").
    from torch.ao.quantization import get_default_qconfig_mapping as default_mapping
    torch.manual_seed(0)
    model = _FunctionalConvReLU().eval()
    x = torch.randn(2, 3, 9, 8)
    prepared = prepare_fx(model, default_mapping("fbgemm"), (x,))
    prepared(x)  # raised
    observed = [m for m in prepared.modules() if hasattr(m, "ch_axis") and m.min_val.numel()]
    assert any(torch.equal(m.min_val, model.w.detach().amin(dim=(1, 2, 3))) for m in observed)


def test_a_quant_range_outside_the_dtype_is_refused_at_prepare():
    # Seed 146: quint8 with quant_min=-3 converted (in PyTorch too) to a model whose quantize
    # then failed at run: "zero_point -3 is below lower bound".
    qconfig = QConfig(activation=MinMaxObserver.with_args(dtype=torch.quint8, quant_min=-3,
                                                          quant_max=252),
                      weight=MinMaxObserver.with_args(dtype=torch.qint8))
    model = nn.Sequential(nn.ReLU(), nn.MaxPool2d(3, 1, 1)).eval()
    with pytest.raises(fuselage.FuselageError,
                       match=r"global.activation.*\[-3, 252\] lie outside torch.quint8's "
                             r"range \[0, 255\]"):
        prepare_fx(model, QConfigMapping().set_global(qconfig), (torch.randn(1, 2, 4, 4),))


def test_a_module_name_entry_for_the_root_is_ignored_as_pytorch_ignores_it():
    # set_module_name("", ...) was refused ("field 'module_name': missing"); PyTorch's
    # _get_module_name_qconfig never consults it, so nothing is quantized by it.
    from torch.ao.quantization import get_default_qconfig
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()).eval()
    x = torch.randn(1, 3, 8, 8)
    mapping = QConfigMapping().set_module_name("", get_default_qconfig("qnnpack"))
    with pytest.warns(UserWarning, match="quantize no op"):
        prepared = prepare_fx(model, mapping, (x,))
    prepared(x)
    with torch.no_grad():
        assert torch.equal(convert_fx(prepared)(x), model(x))
