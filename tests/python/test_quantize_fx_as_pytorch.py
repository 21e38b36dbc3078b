"""fuselage.quantize_fx where PyTorch's own FX test suite (tests/conformance/
pytorch_fx_suite) found it differing from torch.ao.quantization.quantize_fx: each test
runs PyTorch's flow and fuselage's on the same model and compares what the user sees."""

import copy
import warnings

import pytest
import torch
import torch.ao.quantization.quantize_fx as torch_qfx
import torch.nn as nn
import torch.nn.functional as F
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.observer import FixedQParamsObserver

import fuselage.quantize_fx as qfx


class FixedQParamsOps(nn.Module):
    """Every op the default mappings give a FixedQParamsObserver: sigmoid, hardsigmoid,
    tanh, softmax."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.hardsigmoid = nn.Hardsigmoid()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = self.conv(x)
        y = torch.sigmoid(y) + self.hardsigmoid(y)
        y = torch.tanh(y).mean((2, 3))
        return torch.softmax(self.fc(y), -1)


def _batches(shape, n=4, seed=3):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g) for _ in range(n)]


def _flow(quantize_fx, model, mapping, example, batches):
    prepared = quantize_fx.prepare_fx(copy.deepcopy(model), mapping, (example,))
    with torch.no_grad():
        for x in batches:
            prepared(x)
    return prepared, quantize_fx.convert_fx(prepared)


def test_fixed_qparams_observers_are_pytorchs_and_convert_as_pytorch():
    # Was: ModelFileError "cannot assign 'float' as buffer 'scale'" at prepare_fx (the
    # engine's scale is a number; PyTorch keeps a shape-[1] tensor buffer).
    torch.manual_seed(0)
    model = FixedQParamsOps().eval()
    example = torch.randn(2, 3, 10, 10)
    mapping = get_default_qconfig_mapping("qnnpack")
    batches = _batches(example.shape)
    prepared, converted = _flow(qfx, model, mapping, example, batches)
    fixed = [m for m in prepared.modules() if isinstance(m, FixedQParamsObserver)]
    assert fixed, "no FixedQParamsObserver in the prepared model"
    for m in fixed:
        assert isinstance(m.scale, torch.Tensor) and m.scale.shape == (1,)
        assert isinstance(m.zero_point, torch.Tensor) and m.zero_point.shape == (1,)
    # The same observers PyTorch's prepare places (scales 1/256, 1/256, 2/256).
    theirs, expected = _flow(torch_qfx, model, mapping, example, batches)
    theirs_fixed = [m for m in theirs.modules() if isinstance(m, FixedQParamsObserver)]
    assert sorted(float(m.scale) for m in fixed) == \
        sorted(float(m.scale) for m in theirs_fixed)
    x = _batches(example.shape, n=1, seed=9)[0]
    torch.testing.assert_close(converted(x), expected(x), atol=1.0 / 256, rtol=0)


def test_mobilenet_v3_small_prepares_under_the_default_qnnpack_mapping():
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.mobilenet_v3_small().eval()
    x = torch.randn(1, 3, 224, 224)
    prepared = qfx.prepare_fx(model, get_default_qconfig_mapping("qnnpack"), (x,))
    assert any(isinstance(m, FixedQParamsObserver) for m in prepared.modules())


class SmallNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


def test_an_uncalibrated_model_converts_with_pytorchs_defaults_and_a_warning():
    # Was: EngineError "saw no value" at convert_fx; PyTorch converts (scale 1.0, zero
    # point 0) and warns, and its suite converts uncalibrated models to inspect them.
    torch.manual_seed(0)
    model = SmallNet().eval()
    example = torch.randn(1, 3, 8, 8)
    mapping = get_default_qconfig_mapping("qnnpack")
    prepared = qfx.prepare_fx(copy.deepcopy(model), mapping, (example,))
    with pytest.warns(UserWarning, match=r"saw no value \(.*activation_post_process_0"):
        converted = qfx.convert_fx(prepared)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch_qfx.convert_fx(torch_qfx.prepare_fx(copy.deepcopy(model), mapping,
                                                           (example,)))
    x = torch.randn(1, 3, 8, 8)
    torch.testing.assert_close(converted(x), theirs(x))
    # The input is quantized at PyTorch's default parameters, scale 1.0 and zero point 0.
    quantize = [n for n in converted.graph.nodes if n.target == torch.quantize_per_tensor]
    assert quantize and float(_arg_value(converted, quantize[0].args[1])) == 1.0
    assert int(_arg_value(converted, quantize[0].args[2])) == 0


def _arg_value(graph_module, arg):
    if isinstance(arg, torch.fx.Node):
        return getattr(graph_module, arg.target)
    return arg


def test_a_calibrated_model_converts_without_a_warning():
    model = SmallNet().eval()
    example = torch.randn(1, 3, 8, 8)
    prepared, _ = None, None
    prepared = qfx.prepare_fx(model, get_default_qconfig_mapping("qnnpack"), (example,))
    prepared(example)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        qfx.convert_fx(prepared)


class DropoutNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(5, 10)
        self.dropout = nn.Dropout(0.5)

    def forward(self, x):
        return self.dropout(self.fc(x))


def test_prepare_fx_of_a_model_in_training_mode_is_prepared_in_that_mode():
    # Was: ConfigTranslationError "the model is in training mode". PyTorch prepares it
    # and returns the prepared model in training mode (test_prepare_mode).
    mapping = get_default_qconfig_mapping("qnnpack")
    x = torch.randn(4, 5)
    ours = qfx.prepare_fx(DropoutNet().train(), mapping, (x,))
    theirs = torch_qfx.prepare_fx(DropoutNet().train(), mapping, (x,))
    assert ours.training == theirs.training is True
    assert ours.get_submodule("dropout").training
    assert not qfx.prepare_fx(DropoutNet().eval(), mapping, (x,)).training


def test_prepare_fx_refuses_a_batch_norm_in_training_mode_as_pytorch_fails_on_it():
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4)).train()
    x = torch.randn(2, 3, 4, 4)
    mapping = get_default_qconfig_mapping("qnnpack")
    with pytest.raises(Exception):
        torch_qfx.prepare_fx(copy.deepcopy(model), mapping, (x,))
    from fuselage.errors import ConfigTranslationError
    with pytest.raises(ConfigTranslationError, match=r"batch norm '1' is in training mode"):
        qfx.prepare_fx(model, mapping, (x,))


class ConvThen(nn.Module):
    def __init__(self, op):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.op = op

    def forward(self, x):
        return self.op(self.conv(x))


@pytest.mark.parametrize("op", [
    nn.LayerNorm([4, 6, 6]), nn.InstanceNorm2d(4, affine=True), nn.InstanceNorm2d(4),
    nn.LayerNorm([6], elementwise_affine=False), nn.GroupNorm(2, 4),
    nn.LeakyReLU(0.1), nn.BatchNorm2d(4),
], ids=lambda op: repr(op))
def test_quantized_norms_and_activations_convert_as_pytorch(op):
    # Was: ModelFileError "cannot rebuild LayerNorm: its constructor needs 'weight'" (the
    # quantized norms take their weight and bias as constructor arguments).
    torch.manual_seed(0)
    model = ConvThen(op).eval()
    example = torch.randn(2, 3, 6, 6)
    mapping = get_default_qconfig_mapping("qnnpack")
    batches = _batches(example.shape)
    _, converted = _flow(qfx, model, mapping, example, batches)
    _, expected = _flow(torch_qfx, model, mapping, example, batches)
    assert [type(m) for m in converted.modules()][-1] is type(list(expected.modules())[-1])
    x = _batches(example.shape, n=1, seed=9)[0]
    torch.testing.assert_close(converted(x), expected(x))


def test_prepared_observers_are_on_the_root_as_in_pytorch():
    # Was: observers under `observers.` with dotted node targets, so
    # getattr(prepared, node.target) failed (the suite's _check_not_observed).
    torch.manual_seed(0)
    model = SmallNet().eval()
    example = torch.randn(1, 3, 8, 8)
    mapping = get_default_qconfig_mapping("qnnpack")
    prepared = qfx.prepare_fx(copy.deepcopy(model), mapping, (example,))
    theirs = torch_qfx.prepare_fx(copy.deepcopy(model), mapping, (example,))

    def observer_targets(gm):
        return [n.target for n in gm.graph.nodes if n.op == "call_module" and
                n.target.startswith("activation_post_process_")]

    ours_targets = observer_targets(prepared)
    # PyTorch's names; a node sharing its input's observer (mean) calls the same instance,
    # by a name of its own in PyTorch, by the same name in fuselage (a known difference:
    # fuselage/_prepared.py flatten_observers).
    assert sorted(set(ours_targets)) == sorted(set(observer_targets(theirs)) & set(ours_targets))
    assert len(ours_targets) == len(observer_targets(theirs))
    assert len(set(ours_targets)) == len(set(observer_targets(theirs))) - 1
    observer_nodes = [n for n in prepared.graph.nodes if n.op == "call_module" and
                      "post_process" in n.target]
    assert [n.target for n in observer_nodes] == ours_targets
    for target in ours_targets:
        assert type(getattr(prepared, target)) is type(getattr(theirs, target))
    # Copies convert the same as the original, as before.
    batches = _batches(example.shape)
    with torch.no_grad():
        for x in batches:
            prepared(x)
    copied = copy.deepcopy(prepared)
    x = _batches(example.shape, n=1, seed=9)[0]
    torch.testing.assert_close(qfx.convert_fx(copied)(x), qfx.convert_fx(prepared)(x))
    assert any(isinstance(m, torch.ao.nn.quantized.Conv2d)
               for m in qfx.convert_fx(copy.deepcopy(prepared)).modules())


class QatSigmoid(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.sigmoid(self.bn(self.conv(x)))


def test_a_qat_model_with_fixed_qparams_ops_converts():
    # Was: EngineError "FixedQParamsObserver: attribute 'reduce_range' is missing" (PyTorch's
    # own FixedQParamsObserver, wrapped by FixedQParamsFakeQuantize, has none; the suite's
    # test_model_dropout, mobilenet_v3_small).
    from torch.ao.quantization import get_default_qat_qconfig_mapping
    torch.manual_seed(0)
    x = torch.randn(2, 3, 8, 8)
    prepared = qfx.prepare_qat_fx(QatSigmoid().train(), get_default_qat_qconfig_mapping("qnnpack"),
                                  (x,))
    for batch in _batches(x.shape, n=3):
        prepared(batch)
    prepared.eval()
    with torch.no_grad():
        fake_quantized = prepared(x)
    converted = qfx.convert_fx(prepared)
    torch.testing.assert_close(converted(x), fake_quantized, atol=2.0 / 256, rtol=0)


def _observed_args(prepared, method):
    """The positions of `method`'s args that an observer produces."""
    from fuselage._prepared import _is_observer_module
    for node in prepared.graph.nodes:
        if node.op == "call_method" and node.target == method:
            return [i for i, a in enumerate(node.args) if isinstance(a, torch.fx.Node) and
                    a.op == "call_module" and _is_observer_module(getattr(prepared, a.target))]
    raise AssertionError(f"no call_method {method}")


class PermuteByInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x, y, z):
        return self.conv(x).permute(0, y, z, 1)


class AddRank(nn.Module):
    def forward(self, x):
        return torch.add(x, x.ndim - 1 - 1)


def test_non_tensor_values_are_not_observed_as_pytorch():
    # Was: observers on the ints (a shape method's dims; `x.ndim - 2`), which raised
    # "'int' object has no attribute 'numel'" when the prepared model ran.
    mapping = get_default_qconfig_mapping("qnnpack")
    args = (torch.randn(1, 3, 6, 6), 2, 3)
    prepared = qfx.prepare_fx(PermuteByInputs().eval(), mapping, args)
    assert _observed_args(prepared, "permute") == \
        _observed_args(torch_qfx.prepare_fx(PermuteByInputs().eval(), mapping, args), "permute")
    prepared(*args)
    x = torch.rand(4, 4, 4, 4)
    prepared = qfx.prepare_fx(AddRank().eval(), mapping, (x,))
    prepared(x)
    theirs = torch_qfx.prepare_fx(AddRank().eval(), mapping, (x,))
    theirs(x)
    torch.testing.assert_close(qfx.convert_fx(prepared)(x), torch_qfx.convert_fx(theirs)(x))


def test_preserved_attributes_as_pytorch():
    # Was: ConfigTranslationError "prepare_custom_config is not supported" for any setting.
    model = SmallNet().eval()
    model.preserved_attr = 3
    example = torch.randn(1, 3, 8, 8)
    mapping = get_default_qconfig_mapping("qnnpack")
    for quantize_fx in (torch_qfx, qfx):
        prepared = quantize_fx.prepare_fx(
            copy.deepcopy(model), mapping, (example,),
            prepare_custom_config={"preserved_attributes": ["preserved_attr"]})
        assert prepared.preserved_attr == 3
        assert copy.deepcopy(prepared).preserved_attr == 3
        prepared(example)
        converted = quantize_fx.convert_fx(
            prepared, convert_custom_config={"preserved_attributes": ["preserved_attr"]})
        assert converted.preserved_attr == 3
        assert copy.deepcopy(converted).preserved_attr == 3
    fused = qfx.fuse_fx(copy.deepcopy(model),
                        fuse_custom_config={"preserved_attributes": ["preserved_attr"]})
    assert fused.preserved_attr == 3


def test_other_custom_config_settings_are_refused_by_name():
    from fuselage.errors import ConfigTranslationError
    with pytest.raises(ConfigTranslationError, match=r"\['a_setting_pytorch_lacks'\]"):
        qfx.prepare_fx(SmallNet().eval(), get_default_qconfig_mapping("qnnpack"),
                       (torch.randn(1, 3, 8, 8),),
                       prepare_custom_config={"a_setting_pytorch_lacks": ["conv"],
                                              "preserved_attributes": []})


class Tanh(nn.Module):
    def forward(self, x):
        return torch.tanh(torch.sigmoid(x))


@pytest.mark.skipif(int(torch.__version__.split(".")[0]) >= 2, reason="PyTorch 2 warns and keeps the op float")
def test_a_fixed_qparams_op_with_another_qconfig_is_refused_as_pytorch_1_13():
    # Was: a warning and the op kept float; PyTorch 1.13's prepare_fx raises ValueError.
    from torch.ao.quantization import QConfigMapping, default_qconfig
    mapping = QConfigMapping().set_global(default_qconfig)
    x = torch.randn(2, 2)
    with pytest.raises(ValueError, match="get_default_qconfig_mapping"):
        torch_qfx.prepare_fx(Tanh().eval(), mapping, (x,))
    with pytest.raises(ValueError, match=r"node 'sigmoid'.*get_default_qconfig_mapping"):
        qfx.prepare_fx(Tanh().eval(), mapping, (x,))


class SigmoidLinearGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(2, 2)

    def forward(self, x):
        return F.gelu(self.linear(torch.sigmoid(x)))


def test_the_report_says_why_each_op_stays_float_in_a_field_callers_act_on():
    # The drop-in used to find the refused fixed-qparams ops and the None-qconfig ops by
    # matching prepare's reason text; the report now carries the cause.
    from fuselage import _core as core
    from torch.ao.quantization import QConfigMapping, default_qconfig
    from torch.ao.quantization.backend_config import get_native_backend_config
    Cause = core.KeptFloat.Cause
    mapping = QConfigMapping().set_global(default_qconfig).set_module_name("linear", None)
    m = core.from_torch(SigmoidLinearGelu().eval())
    text = qfx._backend_text(get_native_backend_config(), False)
    report = core.prepare(m, config_text=text, qconfig_mapping_text=qfx._mapping_text(mapping, False))
    causes = {k.node: k.cause for k in report.kept_float}
    # default_qconfig is not sigmoid's fixed-qparams one: 1.13's prepare_fx refuses it;
    # PyTorch 2's backend config says so in sigmoid's dtype configs, and its prepare_fx
    # keeps the op float.
    pytorch_1 = int(torch.__version__.split(".")[0]) < 2
    assert causes == {"sigmoid": Cause.QCONFIG_REFUSED_BY_PYTORCH if pytorch_1
                                 else Cause.NOT_QUANTIZABLE,
                      "linear": Cause.QCONFIG_NONE,
                      "gelu": Cause.NOT_QUANTIZABLE}, report.kept_float  # no native entry
    # ... and the node itself says so, for lowering, wherever the model goes.
    marked = [n.name for n in core.to_torch(m).graph.nodes
              if n.meta.get("fuselage", {}).get("qconfig_none")]
    assert marked == ["linear"]


class TwoConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 1, 1)
        self.conv2 = nn.Conv2d(1, 1, 1)

    def forward(self, x):
        return self.conv2(self.conv1(x))


def _count(gm, op, target):
    return sum(1 for n in gm.graph.nodes if n.op == op and
               (n.target == target if isinstance(target, str) else
                (n.target is target or (n.op == "call_module" and
                                        isinstance(gm.get_submodule(n.target), target)))))


@pytest.mark.parametrize("inputs,outputs", [([0], [0]), ([], [0]), ([0], [])])
def test_quantized_inputs_and_outputs_as_pytorch(inputs, outputs):
    # Was: ConfigTranslationError "prepare_custom_config is not supported".
    from torch.ao.quantization import MinMaxObserver, QConfigMapping, default_qconfig
    torch.manual_seed(0)
    model = TwoConvs().eval()
    example = torch.randn(1, 1, 4, 4)
    mapping = QConfigMapping().set_global(default_qconfig)
    config = {"input_quantized_idxs": inputs, "output_quantized_idxs": outputs}
    results = []
    for quantize_fx in (torch_qfx, qfx):
        prepared = quantize_fx.prepare_fx(copy.deepcopy(model), mapping, (example,),
                                          prepare_custom_config=dict(config))
        observers = _count(prepared, "call_module", MinMaxObserver)
        for x in _batches(example.shape):
            prepared(x)
        converted = quantize_fx.convert_fx(prepared)
        results.append((observers, _count(converted, "call_function", torch.quantize_per_tensor),
                        _count(converted, "call_method", "dequantize"), converted))
    (o1, q1, d1, theirs), (o2, q2, d2, ours) = results
    assert (o2, q2, d2) == (o1, q1, d1)
    x = torch.randn(1, 1, 4, 4)
    xq = torch.quantize_per_tensor(x, 0.05, 128, torch.quint8) if inputs else x
    got, expected = ours(xq), theirs(xq)
    assert got.is_quantized == expected.is_quantized == bool(outputs)
    torch.testing.assert_close(got.dequantize() if outputs else got,
                               expected.dequantize() if outputs else expected)


def test_a_quantized_input_read_by_a_float_op_is_refused():
    from torch.ao.quantization import QConfigMapping, default_qconfig
    from fuselage.errors import ConfigTranslationError
    mapping = QConfigMapping().set_global(default_qconfig).set_module_name("conv1", None)
    with pytest.raises(ConfigTranslationError, match=r"input 0 \('x'\)"):
        qfx.prepare_fx(TwoConvs().eval(), mapping, (torch.randn(1, 1, 4, 4),),
                       prepare_custom_config={"input_quantized_idxs": [0]})


def test_quantized_input_in_prepare_qat_fx_as_pytorch():
    from torch.ao.quantization import get_default_qat_qconfig_mapping
    from torch.ao.quantization.fake_quantize import FakeQuantizeBase
    example = torch.randn(1, 1, 4, 4)
    counts = []
    for quantize_fx in (torch_qfx, qfx):
        prepared = quantize_fx.prepare_qat_fx(
            TwoConvs().train(), get_default_qat_qconfig_mapping("qnnpack"), (example,),
            prepare_custom_config={"input_quantized_idxs": [0]})
        counts.append(_count(prepared, "call_module", FakeQuantizeBase))
        prepared(example)
        converted = quantize_fx.convert_fx(prepared.eval())
        assert _count(converted, "call_function", torch.quantize_per_tensor) == 0
        converted(torch.quantize_per_tensor(example, 0.05, 128, torch.quint8))
    assert counts[0] == counts[1]


class MaskedFill(nn.Module):
    def forward(self, x, mask):
        mask = mask.unsqueeze(0)
        mask = mask.unsqueeze(1)
        return x.masked_fill(mask, 1)


def test_a_bool_mask_reshaped_before_masked_fill_is_not_observed_as_pytorch():
    # Was: observers on the mask and its unsqueezes (PyTorch follows the mask's dtype back
    # through the shape ops; the suite's test_boolean_tensor).
    from fuselage._prepared import _is_observer_module
    from torch.ao.quantization import QConfigMapping, default_qconfig
    mapping = QConfigMapping().set_global(default_qconfig)
    args = (torch.rand(1, 2, 3, 4), torch.rand(3, 4) > 0.5)
    counts = []
    for quantize_fx in (torch_qfx, qfx):
        prepared = quantize_fx.prepare_fx(MaskedFill().eval(), mapping, args)
        counts.append(sum(1 for n in prepared.graph.nodes if n.op == "call_module" and
                          _is_observer_module(prepared.get_submodule(n.target))))
        prepared(*args)
        converted = quantize_fx.convert_fx(prepared)
        torch.testing.assert_close(converted(*args), MaskedFill()(*args))
    assert counts == [0, 0]


class Pool(nn.Module):
    def __init__(self):
        super().__init__()
        self.avgpool2d = nn.AvgPool2d(kernel_size=3)

    def forward(self, x):
        return self.avgpool2d(x)


def test_prepare_qat_fx_fake_quantizes_are_on_the_root_as_in_pytorch():
    # Was: prepare_qat_fx's fake-quantizes under `observers.` (the suite's
    # test_copy_node_has_shared_actpp_instance): a copy node's output shares its input's
    # instance under a name of its own.
    from torch.ao.quantization import default_qat_qconfig
    from torch.ao.quantization.fake_quantize import FakeQuantizeBase
    x = torch.randn(1, 3, 9, 9)
    layouts = []
    for quantize_fx in (torch_qfx, qfx):
        prepared = quantize_fx.prepare_qat_fx(Pool().train(), {"": default_qat_qconfig}, (x,))
        nodes = [n for n in prepared.graph.nodes if n.op == "call_module" and
                 isinstance(prepared.get_submodule(n.target), FakeQuantizeBase)]
        assert all("." not in n.target for n in nodes)
        layouts.append((len(nodes), len({id(prepared.get_submodule(n.target)) for n in nodes})))
        prepared(x)
        converted = quantize_fx.convert_fx(prepared.eval())
        torch.testing.assert_close(converted(x), nn.AvgPool2d(3)(x), atol=0.05, rtol=0)
    assert layouts[0] == layouts[1] == (2, 1)


class _AddsAfterLinears(nn.Module):
    """Two linears then two torch.adds, in the root and in each of two nested children: a
    module_name_object_type_order entry can pick any one of them."""

    def __init__(self, depth=2):
        super().__init__()
        self.fc1 = nn.Linear(1, 1)
        self.fc2 = nn.Linear(1, 1)
        self.child = _AddsAfterLinears(depth - 1) if depth > 0 else None

    def forward(self, x):
        x = self.fc2(self.fc1(x))
        x = torch.add(torch.add(x, x), torch.add(x, x)) if self.child is None else \
            torch.add(torch.add(x, x), x)
        return x if self.child is None else self.child(x)


def _call_sequence(gm):
    """The converted model's calls in order (module types, functions, methods), without
    the get_attr nodes that hold PyTorch's quantization parameters."""
    modules = dict(gm.named_modules())
    calls = []
    for n in gm.graph.nodes:
        if n.op == "call_module":
            calls.append(type(modules[n.target]).__module__.rsplit(".", 2)[0] + "." +
                         type(modules[n.target]).__name__)
        elif n.op in ("call_function", "call_method"):
            calls.append(str(getattr(n.target, "__name__", n.target)))
    return calls


def test_an_add_whose_qconfig_is_none_stays_float_between_quantized_ops_as_pytorch():
    # Was: with module_name_object_type_order entries, an add of child m2 that no entry
    # names (qconfig None) was lowered to quantized.add because its neighbours' observers
    # put dequantize before it and quantize after it; PyTorch's should_skip_lowering keeps
    # it float (PyTorch 1.13's suite: test_qconfig_module_name_object_type_order).
    q = torch.ao.quantization.default_qconfig
    mapping = torch.ao.quantization.QConfigMapping()
    for name, object_type, index in [("", nn.Linear, 0), ("", torch.add, 0),
                                     ("child", nn.Linear, 1), ("child", torch.add, 1),
                                     ("child.child", nn.Linear, 0), ("child.child", torch.add, 2)]:
        mapping.set_module_name_object_type_order(name, object_type, index, q)
    torch.manual_seed(0)
    model = _AddsAfterLinears().eval()
    example = torch.randn(1, 1, 1, 1)
    batches = _batches(example.shape)
    _, want = _flow(torch_qfx, model, mapping, example, batches)
    _, got = _flow(qfx, model, mapping, example, batches)
    assert _call_sequence(got) == _call_sequence(want)
    assert "add" in _call_sequence(got)  # some add stays float, between quantized ops
    with torch.no_grad():
        for x in batches:
            torch.testing.assert_close(got(x), want(x), atol=0, rtol=0)


class _LinearAddLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 4)
        self.fc2 = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc1(x)
        return self.fc2(torch.add(y, y))


def test_an_op_set_to_none_by_object_type_is_not_lowered_as_pytorch():
    # The same rule for a plain mapping: the linears are quantized, torch.add is set to
    # None; the add reads fc1's dequantized output and fc2's input observer quantizes its
    # result, and still it stays float in PyTorch and in fuselage.
    mapping = get_default_qconfig_mapping("qnnpack").set_object_type(torch.add, None)
    torch.manual_seed(0)
    model = _LinearAddLinear().eval()
    example = torch.randn(2, 4)
    batches = _batches(example.shape)
    _, want = _flow(torch_qfx, model, mapping, example, batches)
    _, got = _flow(qfx, model, mapping, example, batches)
    assert _call_sequence(got) == _call_sequence(want)
    assert "add" in _call_sequence(got)
    with torch.no_grad():
        for x in batches:
            torch.testing.assert_close(got(x), want(x), atol=0, rtol=0)


class _ConvLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


def _activation_post_processes(prepared):
    """(class name, dtype, quant_min, quant_max) of each activation_post_process_<n>, as
    the suite's test_qconfig_dict_setup reads them, sorted (PyTorch's numbering skips
    numbers: KNOWN_FAILURES.md, test_observer_fqn)."""
    return sorted((type(m).__name__, str(m.dtype), m.quant_min, m.quant_max)
                  for name, m in prepared.named_children()
                  if name.startswith("activation_post_process_"))


@pytest.mark.parametrize("backend", ["qnnpack", "fbgemm"])
def test_prepare_fx_with_fake_quantize_qconfigs_inserts_them_as_pytorch(backend):
    # Was: ConfigTranslationError "FakeQuantize is a fake-quantize (quantization-aware
    # training): use fuselage.quantize_fx.prepare_qat_fx"; PyTorch's prepare_fx inserts the
    # fake-quantizes where the observers go and keeps the modules float (suite:
    # test_qconfig_dict_setup, test_qnnpack_backend_config).
    from torch.ao.quantization import get_default_qat_qconfig_mapping
    from torch.ao.quantization.fake_quantize import FakeQuantizeBase

    mapping = get_default_qat_qconfig_mapping(backend)
    torch.manual_seed(0)
    model = _ConvLinear().eval()
    example = torch.randn(2, 3, 8, 8)
    batches = _batches(example.shape)
    want_prepared, want = _flow(torch_qfx, model, mapping, example, batches)
    got_prepared, got = _flow(qfx, model, mapping, example, batches)
    assert _activation_post_processes(got_prepared) == \
        _activation_post_processes(want_prepared)
    assert any(isinstance(m, FakeQuantizeBase) for m in got_prepared.modules())
    # No QAT swap: the modules are the float ones, as in PyTorch.
    assert type(got_prepared.get_submodule("fc")) is nn.Linear
    assert _call_sequence(got) == _call_sequence(want)
    with torch.no_grad():
        for x in batches:
            torch.testing.assert_close(got(x), want(x), atol=0, rtol=0)


def test_the_cli_leaves_an_op_whose_qconfig_is_none_float_as_pytorch(cli, tmp_path):
    # The same rule in `fuselage quantize` (pipeline/quantize_flow.cc passes prepare's
    # kept-float ops to the lowering): the add between the quantized linears stays float.
    import subprocess

    import numpy as np

    import fuselage
    from fuselage._translate import qconfig_mapping_to_text
    from test_quantize_ops_like_pytorch import fuselage_calls, torch_calls

    mapping = get_default_qconfig_mapping("qnnpack").set_object_type(torch.add, None)
    torch.manual_seed(0)
    model = _LinearAddLinear().eval()
    example = torch.randn(2, 4)
    _, want = _flow(torch_qfx, model, mapping, example, [example])
    fuselage.export(model, (example,), str(tmp_path / "f.fsl"))
    np.save(tmp_path / "x.npy", example.numpy())
    (tmp_path / "mapping.textproto").write_text(qconfig_mapping_to_text(mapping))
    out = subprocess.run(
        [cli, "quantize", str(tmp_path / "f.fsl"), "--backend=qnnpack",
         f"--calibration={tmp_path / 'x.npy'}",
         f"--qconfig-mapping={tmp_path / 'mapping.textproto'}", "-o", str(tmp_path / "q.fsl")],
        capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = fuselage_calls(tmp_path / "q.fsl")
    assert got["function torch.ops.quantized.add"] == 0, got
    assert got == torch_calls(want), out.stdout


class _FourLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(1, 1)
        self.conv = nn.Conv2d(1, 1, 1)
        self.module_conv1 = nn.Conv2d(1, 1, 1)
        self.module_conv2 = nn.Conv2d(1, 1, 1)
        self.unused = nn.Sequential(nn.Conv2d(1, 1, 1))

    def forward(self, x):
        return self.module_conv2(self.module_conv1(self.conv(self.linear(x))))


def _module_qconfigs(prepared):
    """{module name: its qconfig's observers (class, dtype, qscheme)} of the modules that
    are not observers; "no qconfig" where it has none."""
    from torch.ao.quantization.quantize import is_activation_post_process

    def observers(qconfig):
        if qconfig is None or qconfig == "no qconfig":
            return qconfig
        made = (qconfig.activation(), qconfig.weight())
        return tuple((type(o).__name__, o.dtype, o.qscheme) for o in made)

    return {name: observers(getattr(m, "qconfig", "no qconfig"))
            for name, m in prepared.named_modules()
            if not is_activation_post_process(m) and not name.startswith("observers")}


def test_prepared_modules_carry_their_qconfig_as_pytorch():
    # Was: AttributeError "'Linear' object has no attribute 'qconfig'" (suite:
    # test_qconfig_precedence): PyTorch's prepare_fx sets each module's qconfig (global,
    # object type, module-name regex, module name, by its precedence); users read it.
    from torch.ao.quantization import QConfigMapping, default_qconfig
    from torch.ao.quantization.qconfig import default_per_channel_qconfig

    mapping = QConfigMapping().set_global(default_qconfig) \
        .set_object_type(nn.Conv2d, default_per_channel_qconfig) \
        .set_module_name_regex("module_conv*", None) \
        .set_module_name("module_conv2", default_qconfig)
    example = torch.randn(1, 1, 1, 1)
    model = _FourLayers().eval()
    want = torch_qfx.prepare_fx(copy.deepcopy(model), mapping, (example,))
    got = qfx.prepare_fx(copy.deepcopy(model), mapping, (example,))
    got_qconfigs = _module_qconfigs(got)
    assert {k: got_qconfigs.get(k) for k in _module_qconfigs(want)} == _module_qconfigs(want)
    assert got.module_conv1.qconfig is None and got.module_conv2.qconfig is not None
    got(example)
    qfx.convert_fx(got)(example)  # the attributes do not disturb convert


def test_a_per_channel_conv_transpose_qconfig_is_refused_at_prepare_as_pytorch():
    # PyTorch's prepare_fx checks each module's qconfig as it propagates it
    # (assert_valid_qconfig) and refuses a per-channel weight observer on a ConvTranspose
    # with an AssertionError; fuselage's prepare_fx too (suite:
    # test_convtranspose_per_channel_fails_early), with its own error class that is also
    # an AssertionError.
    from torch.ao.quantization import QConfigMapping
    from torch.ao.quantization.qconfig import default_per_channel_qconfig

    from fuselage.errors import ConfigTranslationError

    model = nn.Sequential(nn.ConvTranspose2d(1, 1, 1)).eval()
    mapping = QConfigMapping().set_global(default_per_channel_qconfig)
    example = (torch.randn(1, 1, 2, 2),)
    with pytest.raises(AssertionError, match="ConvTranspose"):
        torch_qfx.prepare_fx(copy.deepcopy(model), mapping, example)
    with pytest.raises(ConfigTranslationError, match="ConvTranspose") as refused:
        qfx.prepare_fx(copy.deepcopy(model), mapping, example)
    assert isinstance(refused.value, AssertionError)
    assert "module '0' (ConvTranspose2d)" in refused.value.__notes__[0]


class _FunctionalLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.randn(5, 5)
        self.b = torch.randn(5)

    def forward(self, x):
        return torch.nn.functional.linear(x, self.w, self.b)


class _NestedFunctionals(nn.Module):
    """Functional linears in submodules and a functional conv on the root."""

    def __init__(self):
        super().__init__()
        self.mods1 = nn.Sequential(_FunctionalLinear(), _FunctionalLinear())
        self.mods2 = _FunctionalLinear()
        self.w = torch.randn(2, 1, 1, 1)
        self.b = torch.randn(2)

    def forward(self, x):
        x = torch.relu(self.mods2(self.mods1(x)))
        # The root calls it: PyTorch names its packed weight by the caller, not the owner.
        x = torch.nn.functional.linear(x, self.mods2.w, self.mods2.b)
        # Every conv arg given: PyTorch's own convert fails to pack one without them.
        return torch.nn.functional.conv2d(x.reshape(1, 1, 5, 5), self.w, self.b, (1, 1),
                                          (0, 0), (1, 1), 1)


def _packed_weight_names(gm):
    return sorted(n.target for n in gm.graph.nodes
                  if n.op == "get_attr" and "_packed_weight_" in n.target)


def test_packed_weights_are_named_and_in_the_state_dict_as_pytorch(tmp_path):
    # Was: `_packed_weight_<i>` for every functional conv / linear, and not in the state
    # dict (test_packed_weight_fused_op, test_state_dict, test_functional_conv).
    mapping = get_default_qconfig_mapping("fbgemm")
    example = torch.rand(5, 5)
    torch.manual_seed(0)
    model = _NestedFunctionals().eval()
    theirs = _flow(torch_qfx, model, mapping, example, [example])[1]
    ours = _flow(qfx, model, mapping, example, [example])[1]
    names = _packed_weight_names(theirs)
    assert names == ["_packed_weight_0", "_packed_weight_1", "mods1_0_packed_weight_0",
                     "mods1_1_packed_weight_0", "mods2_packed_weight_0"]
    assert _packed_weight_names(ours) == names
    state = ours.state_dict()
    assert set(names) <= set(state)
    # The float weights and biases the packed ones replace are gone, as in PyTorch's (whose
    # other keys are its activation scales and zero points, inline in fuselage's graph),
    # and so are the emptied submodules: an nn.Sequential of them did not script.
    assert set(state) <= set(theirs.state_dict()), set(state) - set(theirs.state_dict())
    x = torch.rand(5, 5)
    assert torch.equal(torch.jit.script(ours)(x), ours(x))
    # Another model's converted weights load into this one. (Its activation scales and
    # zero points do not: they are inline args, not PyTorch's buffers; KNOWN_FAILURES.md.)
    torch.manual_seed(1)
    other = _flow(qfx, _NestedFunctionals().eval(), mapping, example, [example])[1]

    def weights(gm, name):
        weight, bias = getattr(gm, name).unpack()
        return weight.int_repr(), bias

    for name in names:
        assert not torch.equal(weights(other, name)[0], weights(ours, name)[0]), name
    with pytest.warns(UserWarning, match="activation scale and zero point inline"):
        other.load_state_dict(state)
    for name in names:
        assert torch.equal(weights(other, name)[0], weights(ours, name)[0]), name
        assert torch.equal(weights(other, name)[1], weights(ours, name)[1]), name
    # Through a file, as test_state_dict does.
    torch.manual_seed(2)
    other = _flow(qfx, _NestedFunctionals().eval(), mapping, example, [example])[1]
    torch.save(ours.state_dict(), tmp_path / "state.pt")
    other.load_state_dict(torch.load(tmp_path / "state.pt", weights_only=False))
    for name in names:
        assert torch.equal(weights(other, name)[0], weights(ours, name)[0]), name


# ---- a convert-time qconfig_mapping that narrows prepare's (test_convert_qconfig_mapping) ----

class _LinearAddMulLinear(nn.Module):
    """Functional linears in a Sequential, torch.add and torch.mul with a number, and an
    nn.Linear: the suite's test_convert_qconfig_mapping model."""

    def __init__(self):
        super().__init__()
        self.mods1 = nn.Sequential(_FunctionalLinear(), _FunctionalLinear())
        self.mods3 = nn.Linear(5, 5)

    def forward(self, x):
        x = torch.add(self.mods1(x), 4)
        return self.mods3(torch.mul(x, 5))


def _ops(gm):
    """The converted graph's ops in order: functions and methods by name, modules by
    class."""
    out = []
    for n in gm.graph.nodes:
        if n.op in ("call_function", "call_method"):
            out.append(getattr(n.target, "__name__", str(n.target)))
        elif n.op == "call_module":
            out.append(type(gm.get_submodule(n.target)).__name__)
    return out


def _narrowing_mappings(qconfig):
    from torch.ao.quantization import QConfigMapping

    def prepare_mapping():
        return QConfigMapping().set_object_type(F.linear, qconfig) \
            .set_object_type(torch.add, qconfig).set_object_type(nn.Linear, qconfig)

    return prepare_mapping, {
        # A key of its own set to None: the first functional linear stays float, and so
        # does the observer before it (its input and its only user have no qconfig).
        "module_name": prepare_mapping().set_module_name("mods1.0", None),
        # A prepare-time key set to None: nn.Linear stays a float nn.Linear.
        "object_type": QConfigMapping().set_object_type(F.linear, qconfig)
        .set_object_type(torch.add, qconfig).set_object_type(nn.Linear, None),
    }


@pytest.mark.parametrize("qat", [False, True])
@pytest.mark.parametrize("check", ["module_name", "object_type"])
def test_a_convert_time_mapping_that_narrows_prepares_converts_as_pytorch(qat, check):
    # Was: ConfigTranslationError "qconfig_mapping differs from the one given to prepare_fx".
    from torch.ao.quantization import get_default_qat_qconfig, get_default_qconfig

    qconfig = (get_default_qat_qconfig if qat else get_default_qconfig)("qnnpack")
    prepare_mapping, narrowed = _narrowing_mappings(qconfig)
    example = torch.rand(5, 5)
    converted, outputs = {}, {}
    for name, flow in (("torch", torch_qfx), ("fuselage", qfx)):
        torch.manual_seed(0)
        model = _LinearAddMulLinear()
        prepare = flow.prepare_qat_fx if qat else flow.prepare_fx
        prepared = prepare(model.train() if qat else model.eval(), prepare_mapping(),
                           (example,))
        with torch.no_grad():
            for x in _batches((5, 5)):
                prepared(x)
        converted[name] = flow.convert_fx(prepared.eval(), qconfig_mapping=narrowed[check])
        with torch.no_grad():
            outputs[name] = converted[name](example)
    assert _ops(converted["fuselage"]) == _ops(converted["torch"])
    kept_float = "linear" if check == "module_name" else "Linear"
    assert kept_float in _ops(converted["fuselage"])
    assert torch.allclose(outputs["fuselage"], outputs["torch"], rtol=0, atol=1e-5)


def test_a_convert_time_mapping_that_does_more_than_narrow_is_refused_naming_the_key():
    from torch.ao.quantization import QConfigMapping, default_qconfig, get_default_qconfig

    import fuselage

    qconfig = get_default_qconfig("qnnpack")
    prepare_mapping, _ = _narrowing_mappings(qconfig)
    example = torch.rand(5, 5)
    prepared = qfx.prepare_fx(_LinearAddMulLinear().eval(), prepare_mapping(), (example,))
    prepared(example)
    refused = {
        "no key object_type 'torch.add'": QConfigMapping().set_object_type(F.linear, qconfig)
        .set_object_type(nn.Linear, qconfig),
        "qconfig for object_type 'nn.Linear' differs": prepare_mapping()
        .set_object_type(nn.Linear, default_qconfig),
        "global qconfig differs": prepare_mapping().set_global(qconfig),
        "key module_name 'mods3' is not in the one given": prepare_mapping()
        .set_module_name("mods3", qconfig),
    }
    for message, mapping in refused.items():
        with pytest.raises(fuselage.ConfigTranslationError, match=message):
            qfx.convert_fx(copy.deepcopy(prepared), qconfig_mapping=mapping)
    # PyTorch refuses the first three too (an AssertionError).
    for mapping in list(refused.values())[:3]:
        theirs = torch_qfx.prepare_fx(_LinearAddMulLinear().eval(), prepare_mapping(),
                                      (example,))
        theirs(example)
        with pytest.raises(AssertionError):
            torch_qfx.convert_fx(theirs, qconfig_mapping=mapping)


def test_a_prepared_model_scripts_as_pytorchs_with_what_convert_keeps_of_its_mapping():
    # Was (while the prepare-time mapping was kept for convert as a dict of tuple keys):
    # RuntimeError "Error inferring type for _fuselage_qconfig_mapping_entries" (the suite's
    # test_qat_and_script).
    from torch.ao.quantization import QConfigMapping, get_default_qat_qconfig

    mapping = QConfigMapping().set_global(get_default_qat_qconfig("qnnpack"))
    x = torch.randn(5, 5)
    for flow in (torch_qfx, qfx):
        torch.manual_seed(0)
        prepared = flow.prepare_qat_fx(nn.Sequential(nn.Linear(5, 5), nn.ReLU()).train(),
                                       mapping, (x,))
        scripted = torch.jit.script(prepared)
        assert torch.equal(scripted(x), prepared(x))


class _PoolHead(nn.Module):
    """conv -> relu -> AdaptiveAvgPool2d(1) -> flatten -> linear: a classifier's head."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.relu = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.relu(self.conv(x))), 1))


def _pool_observed_on_its_own():
    """PyTorch's native BackendConfig with nn.AdaptiveAvgPool2d's output observed apart
    from its input (ONNX Runtime's rule for GlobalAveragePool)."""
    from torch.ao.quantization.backend_config import ObservationType, get_native_backend_config

    config = get_native_backend_config()
    configs = config.configs
    for pattern_config in configs.values() if isinstance(configs, dict) else configs:
        if pattern_config.pattern is nn.AdaptiveAvgPool2d:
            pattern_config.set_observation_type(
                ObservationType.OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT)
    return config


def _observers_by_input(prepared):
    """{name of the node an observer reads: its scale and zero point}, and the observer
    module paths of the pool's input and output."""
    qparams, pool_observers = {}, None
    for node in prepared.graph.nodes:
        if node.op == "call_module" and node.target.startswith("activation_post_process_"):
            scale, zero_point = prepared.get_submodule(node.target).calculate_qparams()
            qparams[node.args[0].name] = (float(scale), int(zero_point))
        if node.op == "call_module" and node.target == "pool":
            pool_observers = (node.args[0].target, next(iter(node.users)).target)
    return qparams, pool_observers


def test_a_pool_observed_apart_from_its_input_prepares_and_converts_as_pytorch():
    # OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT on nn.AdaptiveAvgPool2d: PyTorch's prepare_fx
    # gives the pool's output an observer of its own; its convert_fx then lowers the pool
    # to run on its input's quantized tensor, dropping that observer's quantize.
    torch.manual_seed(0)
    model = _PoolHead().eval()
    example = torch.randn(2, 3, 8, 8)
    batches = _batches(example.shape)
    mapping = get_default_qconfig_mapping("fbgemm")
    flows = {}
    for name, quantize_fx in (("pytorch", torch_qfx), ("fuselage", qfx)):
        prepared = quantize_fx.prepare_fx(copy.deepcopy(model), mapping, (example,),
                                          backend_config=_pool_observed_on_its_own())
        with torch.no_grad():
            for x in batches:
                prepared(x)
        flows[name] = _observers_by_input(prepared) + (quantize_fx.convert_fx(
            prepared, backend_config=_pool_observed_on_its_own()),)
    want_qparams, want_pool_observers, want = flows["pytorch"]
    got_qparams, got_pool_observers, got = flows["fuselage"]
    assert want_pool_observers[0] != want_pool_observers[1]
    assert got_pool_observers[0] != got_pool_observers[1]
    assert got_qparams["pool"][0] != pytest.approx(got_qparams["conv"][0])
    assert got_qparams == {k: pytest.approx(v) for k, v in want_qparams.items()}
    assert _call_sequence(got) == _call_sequence(want)
    with torch.no_grad():
        for x in batches:
            torch.testing.assert_close(got(x), want(x), atol=0, rtol=0)


def test_swin_t_quantizes_as_pytorchs():
    """Issue 41: torchvision's swin_t, which torch.fx traces, failed at fuselage's export.
    Both flows, the same mapping and calibration: fuselage's SQNR against the float model
    within 0.1 dB of PyTorch's (measured equal, to 0.01 dB, on 2.14)."""
    torchvision = pytest.importorskip("torchvision")
    from conftest import x86_engine
    from fx_both import engine, quantize_both

    torch.manual_seed(0)
    model = torchvision.models.swin_t(weights=None).eval()
    x = torch.randn(1, 3, 64, 64)
    with engine(x86_engine()):
        ours, theirs = quantize_both(model, get_default_qconfig_mapping(x86_engine()), x,
                                     None)
        want = model(x)

        def sqnr(y):
            return float(20 * torch.log10(want.norm() / (want - y).norm()))

        ours_sqnr, theirs_sqnr = sqnr(ours(x)), sqnr(theirs(x))
    assert ours_sqnr >= theirs_sqnr - 0.1, (ours_sqnr, theirs_sqnr)


class _BatchNormMLP(nn.Module):
    """Linear -> BatchNorm1d -> ReLU twice, then a Linear: fusion folds each batch norm
    into its linear and leaves the relu after it."""

    def __init__(self):
        super().__init__()
        self.fc1, self.bn1, self.relu1 = nn.Linear(32, 64), nn.BatchNorm1d(64), nn.ReLU()
        self.fc2, self.bn2, self.relu2 = nn.Linear(64, 64), nn.BatchNorm1d(64), nn.ReLU()
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        x = self.relu1(self.bn1(self.fc1(x)))
        return self.head(self.relu2(self.bn2(self.fc2(x))))


def test_a_batchnorm1d_mlp_quantizes_at_pytorchs_sqnr():
    """Issue 41: fuselage observed each folded linear's output (negative values included)
    and made the relu after it share that observer, 2 dB under PyTorch, whose prepare_fx
    matches the unfused (ReLU, Linear) pair as one op and observes only the relu's output.
    Now the same qparams as PyTorch's, so the same outputs (PyTorch lowers the pair to
    nnq.Linear and drops the relu, fuselage to nniq.LinearReLU: equal when the output's
    zero point is its minimum, as after a relu)."""
    from conftest import x86_engine
    from fx_both import engine, quantize_both

    torch.manual_seed(0)
    model = _BatchNormMLP().eval()
    for bn in (model.bn1, model.bn2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        bn.weight.data.uniform_(0.5, 1.5)
        bn.bias.data.uniform_(-0.5, 0.5)
    x = torch.randn(64, 32)
    with engine(x86_engine()):
        ours, theirs = quantize_both(model, get_default_qconfig_mapping(x86_engine()), x, None)
        want = model(x)
        ours_y, theirs_y = ours(x), theirs(x)

    def sqnr(y):
        return float(20 * torch.log10(want.norm() / (want - y).norm()))

    assert sqnr(ours_y) >= sqnr(theirs_y) - 0.05, (sqnr(ours_y), sqnr(theirs_y))
    assert type(ours.fc1).__name__ == "LinearReLU", type(ours.fc1)
    assert (float(ours.fc1.scale), int(ours.fc1.zero_point)) == \
        (float(theirs.fc1.scale), int(theirs.fc1.zero_point))
    step = float(ours.head.scale)
    torch.testing.assert_close(ours_y, theirs_y, atol=step, rtol=0)


def test_a_histogram_observers_range_is_searched_with_torch_sums_total():
    # The observer densenet121's first dense block shares (tests/quantize/
    # gen_densenet_histogram.py): PyTorch's range search compares bin masses with
    # torch.sum's float32 total of the histogram, which here is 0.125 above the correctly
    # rounded total the engine used, and a bin mass falls between the two thresholds:
    # fuselage's convert gave conv0 scale 0.2452, zero point 69 where PyTorch's has 0.2468,
    # 68, and the whole model converted 28 dB away from PyTorch's instead of identical.
    import os
    import numpy as np
    state = np.load(os.path.join(os.path.dirname(__file__), "..", "quantize", "testdata",
                                 "densenet121_shared_histogram.npz"))
    x = torch.randn(1, 3, 4, 4)
    prepared = qfx.prepare_fx(nn.Sequential(nn.Conv2d(3, 3, 1)).eval(),
                              get_default_qconfig_mapping("x86"), (x,))
    prepared(x)
    output_observer = [n.target for n in prepared.graph.nodes if n.op == "call_module"][-1]
    observer = prepared.get_submodule(output_observer)
    observer.histogram.copy_(torch.from_numpy(state["histogram"]))
    observer.min_val.copy_(torch.from_numpy(state["min_val"]))
    observer.max_val.copy_(torch.from_numpy(state["max_val"]))
    scale, zero_point = observer.calculate_qparams()  # PyTorch's
    conv = qfx.convert_fx(copy.deepcopy(prepared)).get_submodule("0")
    assert (conv.scale, conv.zero_point) == (float(scale), int(zero_point))


class _ChannelsLastBetweenConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 4, 3), nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = torch.relu(self.conv1(x)).contiguous(memory_format=torch.channels_last)
        return self.conv2(y)


def test_a_memory_format_argument_is_kept_as_pytorch_keeps_it():
    # `memory_format=torch.channels_last` is an arg the model file holds (Arg.torch_object):
    # fuselage's converted model is PyTorch's, the contiguous call with it, to the bit.
    model = _ChannelsLastBetweenConvs().eval()
    batches = _batches((2, 3, 8, 8))
    converted = []
    for flow in (torch_qfx, qfx):
        prepared = flow.prepare_fx(copy.deepcopy(model), get_default_qconfig_mapping("x86"),
                                   (batches[0],))
        with torch.no_grad():
            for x in batches:
                prepared(x)
        converted.append(flow.convert_fx(prepared))
    theirs, ours = converted
    with torch.no_grad():
        assert torch.equal(ours(batches[0]), theirs(batches[0]))
    assert [n.kwargs for n in ours.graph.nodes if n.target == "contiguous"] == \
        [{"memory_format": torch.channels_last}]


@pytest.mark.parametrize("pool", [nn.MaxPool1d(3, 2, padding=1), nn.AvgPool1d(3, 2, padding=1),
                                  nn.AvgPool1d(2, ceil_mode=True, count_include_pad=False)],
                         ids=["max", "avg", "avg_ceil"])
def test_quantized_1d_pools_run_on_fuselages_runtime_as_in_pytorch(pool, monkeypatch):
    # PyTorch's converted conv1d -> relu -> pool -> conv1d, run on the engine of the x86
    # mapping it was quantized with (QNNPACK's own average pool rounds otherwise): the
    # quantized pool runs on fuselage's runtime (the 2-d kernel over [N, C, 1, L], as
    # ATen's) to the bit.
    from conftest import x86_engine
    from fuselage import _core
    monkeypatch.setattr(torch.backends.quantized, "engine", x86_engine())
    model = nn.Sequential(nn.Conv1d(2, 8, 3, padding=1), nn.ReLU(), pool,
                          nn.Conv1d(8, 4, 1)).eval()
    batches = _batches((2, 2, 17))
    prepared = torch_qfx.prepare_fx(copy.deepcopy(model), get_default_qconfig_mapping("x86"),
                                    (batches[0],))
    with torch.no_grad():
        for x in batches[1:]:
            prepared(x)
        converted = torch_qfx.convert_fx(prepared)
        want = converted(batches[0])
    engine = _core.from_torch(converted, (batches[0],))
    got = torch.from_numpy(_core.run(engine, [batches[0].numpy()])[0])
    assert torch.equal(got, want)
