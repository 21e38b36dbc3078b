"""Dynamic quantization through fuselage.quantize_fx (issue 38 item 3).

default_dynamic_qconfig and per_channel_dynamic_qconfig on nn.Linear, given to
fuselage.quantize_fx.prepare_fx / convert_fx, go through fuselage's prepare (the input
observed by PyTorch's dynamic PlaceholderObserver, the output not), convert (the input
becomes torch.quantize_per_tensor_dynamic -> dequantize, the Linear nnqr.Linear) and
lowering (nnqd.Linear). Each case runs PyTorch's own flow on a copy of the same model with
the same mapping and backend config, on the same engine, and checks:
  - the converted models hold the same module types at the same places, and the dynamic
    Linears the same quantized weight and bias, so both models give the same outputs;
  - fuselage's runtime (its nnqd.Linear kernel, runtime/quantized/dynamic_linear.h) gives
    PyTorch's outputs within 1e-5 of their largest magnitude.
"""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.ao.quantization import (QConfigMapping, default_dynamic_qconfig,
                                   float16_dynamic_qconfig, per_channel_dynamic_qconfig)
from torch.ao.quantization.backend_config import (get_native_backend_config,
                                                  get_qnnpack_backend_config)
from torch.ao.quantization.quantize_fx import convert_fx as torch_convert_fx
from torch.ao.quantization.quantize_fx import prepare_fx as torch_prepare_fx

from fuselage import _core
from fx_both import engine, leaf_types, quantize_both, relative_error
from fuselage.quantize_fx import convert_fx, prepare_fx
from conftest import x86_engine

RTOL = 1e-5


class Mlp(nn.Module):
    """Two Linears with a float op between them, one without bias. (The op is exact, so
    that fuselage's float kernel and PyTorch's agree bit for bit: the second Linear's input
    range, and with it every output, depends on it. A tanh that saturates at 1.0 in one
    and at 1 - 2^-24 in the other changes that scale.)"""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(48, 64)
        self.fc2 = nn.Linear(64, 16, bias=False)

    def forward(self, x):
        return self.fc2(torch.clamp(self.fc1(x), -1.0, 1.5))


class Tokens(nn.Module):
    """A Linear on a [batch, tokens, features] input, as in a transformer."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 24)

    def forward(self, x):
        return self.proj(x) * 2.0


class LinearRelu(nn.Module):
    """Linear -> nn.ReLU fuses (nni.LinearReLU) and becomes nniqd.LinearReLU; the
    functional relu after the second Linear is not fused and stays float, as in PyTorch."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(40, 32)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x):
        return torch.relu(self.fc2(self.relu(self.fc1(x))))


MODELS = {"mlp": (Mlp, (5, 48)), "tokens": (Tokens, (2, 7, 32))}
QCONFIGS = {"per_tensor": default_dynamic_qconfig, "per_channel": per_channel_dynamic_qconfig}


CASES = [(model, qconfig, backend) for model in MODELS for qconfig in QCONFIGS
         for backend in ("x86", "qnnpack")]


@pytest.mark.parametrize("model_name,qconfig_name,backend", CASES)
def test_dynamic_linear_converts_and_runs_like_pytorch(model_name, qconfig_name, backend):
    torch.manual_seed(0)
    cls, shape = MODELS[model_name]
    model = cls().eval()
    example = torch.randn(*shape) * 3
    mapping = QConfigMapping().set_object_type(nn.Linear, QCONFIGS[qconfig_name])
    torch_engine = x86_engine() if backend == "x86" else "qnnpack"
    backend_config = get_native_backend_config() if backend == "x86" else \
        get_qnnpack_backend_config()
    with engine(torch_engine):
        ours, theirs = quantize_both(model, mapping, example, backend_config)
        assert leaf_types(ours) == leaf_types(theirs)
        dynamic = [name for name, t in leaf_types(theirs).items()
                   if t is torch.ao.nn.quantized.dynamic.Linear]
        assert dynamic, leaf_types(theirs)
        for name in dynamic:
            a, b = ours.get_submodule(name), theirs.get_submodule(name)
            assert torch.equal(a.weight().int_repr(), b.weight().int_repr()), name
            assert a.weight().qscheme() == b.weight().qscheme(), name
            assert torch.equal(a.weight().dequantize(), b.weight().dequantize()), name
            assert (a.bias() is None) == (b.bias() is None), name
            if a.bias() is not None:
                assert torch.equal(a.bias(), b.bias()), name
        for seed in range(3):
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * (seed + 1)
            want = theirs(x)
            assert torch.equal(ours(x), want)
            # fuselage's runtime, on the engine whose arithmetic PyTorch's ran.
            fuselage_engine = "qnnpack" if backend == "qnnpack" else "onednn"
            got = torch.from_numpy(_core.run(_core.from_torch(ours), [x.numpy()],
                                             engine=fuselage_engine)[0])
            assert relative_error(got, want) <= RTOL


@pytest.mark.parametrize("backend", ["x86", "qnnpack"])
def test_dynamic_linear_relu_with_a_global_qconfig_like_pytorch(backend):
    torch.manual_seed(0)
    model = LinearRelu().eval()
    example = torch.randn(6, 40)
    mapping = QConfigMapping().set_global(default_dynamic_qconfig)
    torch_engine = x86_engine() if backend == "x86" else "qnnpack"
    backend_config = get_native_backend_config() if backend == "x86" else \
        get_qnnpack_backend_config()
    with engine(torch_engine):
        ours, theirs = quantize_both(model, mapping, example, backend_config)
        assert leaf_types(ours) == leaf_types(theirs)
        assert type(theirs.fc1).__name__ == "LinearReLU", leaf_types(theirs)
        for seed in range(3):
            x = torch.randn(6, 40, generator=torch.Generator().manual_seed(seed)) * (seed + 1)
            want = theirs(x)
            assert torch.equal(ours(x), want)
            got = torch.from_numpy(_core.run(
                _core.from_torch(ours), [x.numpy()],
                engine="qnnpack" if backend == "qnnpack" else "onednn")[0])
            assert relative_error(got, want) <= RTOL


def test_dynamic_linear_in_fuselages_reference_and_runtime():
    """convert_to_reference_fx keeps the dynamic pattern (quantize_per_tensor_dynamic ->
    dequantize -> nnqr.Linear), which fuselage's runtime runs; lowering it gives
    nnqd.Linear."""
    from fuselage.quantize_fx import convert_to_reference_fx

    torch.manual_seed(0)
    model = Mlp().eval()
    example = torch.randn(5, 48)
    mapping = QConfigMapping().set_object_type(nn.Linear, default_dynamic_qconfig)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = prepare_fx(model, mapping, (example,))
    prepared(example)
    reference = convert_to_reference_fx(copy.deepcopy(prepared))
    targets = [n.target for n in reference.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.quantize_per_tensor_dynamic) == 2
    assert {type(m).__name__ for m in reference.modules()} >= {"Linear"}
    assert isinstance(reference.fc1, torch.ao.nn.quantized.reference.Linear)
    # The reference model's numerics (the input quantized with parameters from its range,
    # dequantized, a float linear with the dequantized weight) are PyTorch's own reference
    # model's, on either engine (QNNPACK ignores reduce_range).
    for torch_engine, fuselage_engine in ((x86_engine(), "onednn"), ("qnnpack", "qnnpack")):
        with engine(torch_engine):
            want = reference(example)
        got = _core.run(_core.from_torch(reference), [example.numpy()], engine=fuselage_engine)[0]
        assert relative_error(torch.from_numpy(got), want) <= 1e-5, torch_engine
    lowered = convert_fx(prepared)
    assert isinstance(lowered.fc1, torch.ao.nn.quantized.dynamic.Linear)


def test_static_qconfig_elsewhere_and_report():
    """A dynamic Linear beside statically quantized ops: the static ones keep their
    observers and the dynamic one gets no output observer; ops a dynamic qconfig reaches
    that have no dynamic form stay float, and the report says why."""
    from fuselage.quantize_fx import prepare_with_report

    torch.manual_seed(0)
    model = Mlp().eval()
    mapping = QConfigMapping().set_global(default_dynamic_qconfig)
    prepared, report = prepare_with_report(model, mapping, get_native_backend_config())
    assert report.quantized_ops == 2
    kept = {k.node: k.reason for k in report.kept_float}
    assert "clamp" in kept and "dynamic" in kept["clamp"], kept
    observers = [n for n in prepared.graph.nodes if n.op == "call_module" and
                 "activation_post_process" in n.name]
    assert len(observers) == 2  # the two Linears' inputs; no output observers


@pytest.mark.skipif("fbgemm" not in torch.backends.quantized.supported_engines,
                    reason="PyTorch's float16 dynamic Linear needs FBGEMM (1.13's Debian "
                           "build has none)")
@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_float16_dynamic_linear_converts_and_runs_like_pytorch(model_name):
    """float16_dynamic_qconfig: nnqd.Linear(dtype=torch.float16), the weight cast to
    float16, as PyTorch's convert_fx makes it; fuselage's runtime multiplies in float32."""
    torch.manual_seed(0)
    cls, shape = MODELS[model_name]
    model = cls().eval()
    example = torch.randn(*shape)
    mapping = QConfigMapping().set_object_type(nn.Linear, float16_dynamic_qconfig)
    with engine(x86_engine()):
        ours, theirs = quantize_both(model, mapping, example, get_native_backend_config())
        assert leaf_types(ours) == leaf_types(theirs)
        dynamic = [name for name, t in leaf_types(theirs).items()
                   if t is torch.ao.nn.quantized.dynamic.Linear]
        assert dynamic, leaf_types(theirs)
        for name in dynamic:
            a, b = ours.get_submodule(name), theirs.get_submodule(name)
            assert a._packed_params.dtype == b._packed_params.dtype == torch.float16
            assert torch.equal(a.weight(), b.weight()), name
        for seed in range(3):
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * (seed + 1)
            want = theirs(x)
            assert torch.equal(ours(x), want)
            got = torch.from_numpy(_core.run(_core.from_torch(ours), [x.numpy()])[0])
            assert relative_error(got, want) <= RTOL


def test_dynamic_linear_through_the_engines_own_pipeline():
    """The pipeline `fuselage quantize` runs (fuse, prepare, calibrate in fuselage's
    interpreter, convert, lower) with the translated mapping gives the same nnqd.Linear."""
    from fuselage._translate import qconfig_mapping_to_text

    torch.manual_seed(0)
    model = Tokens().eval()
    example = torch.randn(2, 7, 32)
    mapping = QConfigMapping().set_object_type(nn.Linear, default_dynamic_qconfig)
    with engine(x86_engine()):
        _, theirs = quantize_both(model, mapping, example, get_native_backend_config())
        m = _core.from_torch(model)
        _core.quantize(m, [[example.numpy()]], "fbgemm",
                       qconfig_mapping_text=qconfig_mapping_to_text(mapping))
        ours = _core.to_torch(m)
        assert leaf_types(ours) == leaf_types(theirs)
        assert torch.equal(ours.proj.weight().int_repr(), theirs.proj.weight().int_repr())
        x = torch.randn(2, 7, 32) * 4
        got = torch.from_numpy(_core.run(m, [x.numpy()])[0])
        assert relative_error(got, theirs(x)) <= RTOL


class Mixed(nn.Module):
    """A statically quantized op before a dynamic Linear: the Linear's dynamic observer is
    its own, not the static one on the clamp's output."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(24, 8)

    def forward(self, x):
        return self.fc(torch.clamp(x, -1.0, 1.5))


@pytest.mark.skipif(torch.__version__.startswith("1."),
                    reason="PyTorch 1.13's prepare_fx makes this Linear static (nnq.Linear): "
                           "the global static qconfig wins there")
def test_dynamic_linear_after_a_static_op_like_pytorch():
    from torch.ao.quantization import get_default_qconfig

    torch.manual_seed(0)
    model = Mixed().eval()
    example = torch.randn(4, 24) * 2
    mapping = QConfigMapping().set_global(get_default_qconfig("qnnpack")) \
        .set_object_type(nn.Linear, default_dynamic_qconfig)
    with engine("qnnpack"):
        ours, theirs = quantize_both(model, mapping, example, get_qnnpack_backend_config())
        assert leaf_types(ours) == leaf_types(theirs)
        assert isinstance(ours.fc, torch.ao.nn.quantized.dynamic.Linear)
        for seed in range(3):
            x = torch.randn(4, 24, generator=torch.Generator().manual_seed(seed)) * 2
            want = theirs(x)
            assert torch.equal(ours(x), want)
            got = torch.from_numpy(_core.run(_core.from_torch(ours), [x.numpy()],
                                             engine="qnnpack")[0])
            assert relative_error(got, want) <= RTOL


class FunctionalLinear(nn.Module):
    """F.linear with a constant weight (and bias), then relu or not (PyTorch's FuncLinear of
    test_functional_linear)."""

    def __init__(self, bias, relu):
        super().__init__()
        g = torch.Generator().manual_seed(4)
        self.w = torch.randn(6, 30, generator=g)
        self.b = torch.randn(6, generator=g) if bias else None
        self.relu = relu

    def forward(self, x):
        y = F.linear(x, self.w, self.b)
        return F.relu(y) if self.relu else y


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("relu", [True, False])
def test_dynamic_functional_linear_like_pytorch(bias, relu):
    """default_dynamic_qconfig on F.linear, without calibration (dynamic quantization needs
    none): the weight observer runs at convert, as PyTorch's run_weight_observers; the
    reference model holds PyTorch's weight parameters; convert_fx lowers to
    quantized.linear_dynamic (linear_relu_dynamic with the relu), packed, as PyTorch's, with
    PyTorch's outputs; fuselage's runtime gives them too."""
    from fuselage.quantize_fx import convert_to_reference_fx
    from torch.ao.quantization.quantize_fx import convert_to_reference_fx as torch_reference

    model = FunctionalLinear(bias, relu).eval()
    example = torch.rand(3, 30)
    mapping = QConfigMapping().set_global(default_dynamic_qconfig)
    with engine(x86_engine()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = prepare_fx(copy.deepcopy(model), mapping, (example,))
        theirs = torch_prepare_fx(copy.deepcopy(model), mapping, (example,))
        kinds = [type(ours.get_submodule(n.target)).__name__ for n in ours.graph.nodes
                 if n.op == "call_module"]
        assert sorted(kinds) == ["MinMaxObserver", "PlaceholderObserver"]

        def weight_qparams(reference):
            (q,) = [n for n in reference.graph.nodes if n.target is torch.quantize_per_tensor]
            return [float(getattr(reference, a.target)) if isinstance(a, torch.fx.Node)
                    else float(a) for a in q.args[1:3]]

        assert weight_qparams(convert_to_reference_fx(copy.deepcopy(ours))) == \
            weight_qparams(torch_reference(copy.deepcopy(theirs)))
        ours, theirs = convert_fx(ours), torch_convert_fx(theirs)
        native = torch.ops.quantized.linear_relu_dynamic if relu else \
            torch.ops.quantized.linear_dynamic
        for converted in (ours, theirs):
            targets = [n.target for n in converted.graph.nodes if n.op == "call_function"]
            assert targets == [native], targets
        for seed in range(3):
            x = torch.randn(3, 30, generator=torch.Generator().manual_seed(seed)) * (seed + 1)
            want = theirs(x)
            assert torch.equal(ours(x), want)
            engine_model = _core.from_torch(ours)
            got = torch.from_numpy(_core.run(engine_model, [x.numpy()])[0])
            assert relative_error(got, want) <= RTOL
            # The model file holds it: read back, it runs the same, and goes to torch again.
            reread = _core.Model.from_bytes(engine_model.to_bytes())
            assert torch.equal(torch.from_numpy(_core.run(reread, [x.numpy()])[0]), got)
            assert torch.equal(_core.to_torch(reread)(x), want)
