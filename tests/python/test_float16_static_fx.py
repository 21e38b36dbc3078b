"""float16 static quantization through fuselage.quantize_fx (issue 41): float16_static_qconfig
(PlaceholderObserver(dtype=torch.float16) for activation and weight) with PyTorch's
backend config that offers float16 (get_test_only_legacy_native_backend_config).

Each case runs PyTorch's own flow and fuselage's on copies of one model and compares what
PyTorch's test suite checks and what a user sees:
  - the prepared models hold as many observer calls of each class;
  - convert_to_reference_fx and convert_fx give as many quantize_per_tensor, to and
    dequantize nodes (a float16 "quantize" is x.to(torch.float16), then dequantize;
    lowering lets PyTorch's copy / shape ops read the float16 tensor and drops the cast
    after them), and the same outputs;
  - fuselage's own runtime, on the converted model and on it written to a model file and
    read back, gives PyTorch's outputs.
"""
import collections
import copy
import operator
import warnings

import pytest
import torch
import torch.ao.quantization.quantize_fx as torch_qfx
import torch.nn as nn
import torch.nn.functional as F
from torch.ao.quantization import (QConfigMapping, default_qconfig, float16_static_qconfig,
                                   get_default_qconfig)
from torch.ao.quantization.backend_config.native import \
    get_test_only_legacy_native_backend_config

import fuselage.quantize_fx as qfx
from fuselage import _core

BACKEND = get_test_only_legacy_native_backend_config()


class ConvsThenAdds(nn.Module):
    """Two int8 convs feeding float16 adds (PyTorch's BinaryOp of test_add): each conv's
    int8 output observer is followed by a float16 one."""

    def __init__(self, number):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 1)
        self.conv2 = nn.Conv2d(3, 4, 1)
        self.number = number

    def forward(self, x, y):
        x = self.conv1(x)
        y = 3.0 if self.number else self.conv2(y)
        x = x + y
        return y + x


class FuncLinear(nn.Module):
    """F.linear with a constant weight (and bias), then relu or nn.Identity (a copy node,
    which lowering lets read the float16 tensor)."""

    def __init__(self, bias, relu):
        super().__init__()
        g = torch.Generator().manual_seed(5)
        self.w = torch.randn(4, 30, generator=g)
        self.b = torch.randn(4, generator=g) if bias else None
        self.after = nn.ReLU() if relu else nn.Identity()

    def forward(self, x):
        return self.after(F.linear(x, self.w, self.b))


class Int8LinearsAroundFloat16(nn.Module):
    """int8 F.linear -> float16 reshape -> int8 F.linear -> float16 sigmoid (PyTorch's
    test_reshape_fp16 and test_multiple_qconfigs_for_single_value in one)."""

    def __init__(self):
        super().__init__()
        self.w = torch.randn(4, 4, generator=torch.Generator().manual_seed(7))

    def forward(self, x):
        x = F.linear(x, self.w)
        x = x.reshape(-1, 4)
        return torch.sigmoid(F.linear(x, self.w))


def _prepare_both(model, mapping, example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch_qfx.prepare_fx(copy.deepcopy(model), mapping, example,
                                      backend_config=BACKEND)
        ours = qfx.prepare_fx(copy.deepcopy(model), mapping, example, backend_config=BACKEND)
    with torch.no_grad():
        theirs(*example)
        ours(*example)
    return ours, theirs


def _convert(quantize_fx, prepared, reference):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        convert = quantize_fx.convert_to_reference_fx if reference else quantize_fx.convert_fx
        return convert(copy.deepcopy(prepared), backend_config=BACKEND)


def _observer_calls(prepared):
    return collections.Counter(type(prepared.get_submodule(n.target)).__name__
                               for n in prepared.graph.nodes if n.op == "call_module" and
                               "activation_post_process" in n.target)


def _casts_and_quantizes(gm):
    """How many to / dequantize / quantize_per_tensor / quantized op nodes `gm` has."""
    counts = collections.Counter()
    for n in gm.graph.nodes:
        if n.op == "call_method" and n.target in ("to", "dequantize"):
            counts[n.target] += 1
        elif n.op == "call_function" and n.target is torch.quantize_per_tensor:
            counts["quantize_per_tensor"] += 1
        elif n.op == "call_function" and "quantized" in str(n.target):
            counts[str(n.target)] += 1
    return counts


def _check_as_pytorch(model, mapping, example, inputs):
    ours, theirs = _prepare_both(model, mapping, example)
    assert _observer_calls(ours) == _observer_calls(theirs)
    assert _observer_calls(ours)["PlaceholderObserver"] > 0
    for reference in (True, False):
        mine, want = _convert(qfx, ours, reference), _convert(torch_qfx, theirs, reference)
        assert _casts_and_quantizes(mine) == _casts_and_quantizes(want), reference
        assert _casts_and_quantizes(mine)["to"] > 0
        with torch.no_grad():
            for x in inputs:
                torch.testing.assert_close(mine(*x), want(*x), rtol=0, atol=0)
    return mine, want


def _runtime_outputs(converted, inputs):
    """fuselage's runtime on `converted`, and on it saved to a model file and read back."""
    model = _core.from_torch(converted)
    reloaded = _core.Model.from_bytes(model.to_bytes())
    out = []
    for m in (model, reloaded):
        out.append([torch.from_numpy(_core.run(m, [t.numpy() for t in x])[0]) for x in inputs])
    return out


@pytest.mark.parametrize("number", [False, True], ids=["tensor", "number"])
def test_float16_adds_after_int8_convs_as_pytorch(number):
    torch.manual_seed(0)
    mapping = QConfigMapping().set_global(get_default_qconfig("qnnpack")) \
        .set_object_type(operator.add, float16_static_qconfig)
    g = torch.Generator().manual_seed(1)
    inputs = [(torch.randn(2, 3, 5, 5, generator=g), torch.randn(2, 3, 5, 5, generator=g))
              for _ in range(3)]
    mine, want = _check_as_pytorch(ConvsThenAdds(number).eval(), mapping, inputs[0], inputs)
    # Each conv's int8 output is read by the adds through a float16 observer chained
    # after its int8 one, as in PyTorch: quantize -> dequantize -> to -> dequantize.
    assert _casts_and_quantizes(mine)["to"] == (3 if number else 4)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("relu", [True, False])
def test_float16_functional_linear_as_pytorch(bias, relu):
    g = torch.Generator().manual_seed(2)
    inputs = [(torch.rand(3, 30, generator=g),) for _ in range(3)]
    mapping = QConfigMapping().set_global(float16_static_qconfig)
    ours, _ = _prepare_both(FuncLinear(bias, relu).eval(), mapping, inputs[0])
    # activation, weight, bias (float16 too: PyTorch's bias dtype for float16 static) and
    # output, one more for nn.Identity's output (a copy node).
    assert _observer_calls(ours)["PlaceholderObserver"] == 3 + int(bias) + int(not relu)
    mine, want = _check_as_pytorch(FuncLinear(bias, relu).eval(), mapping, inputs[0], inputs)
    for ran, reread in zip(*_runtime_outputs(mine, inputs)):
        assert torch.equal(ran, reread)
    for (x,), ran in zip(inputs, _runtime_outputs(mine, inputs)[0]):
        torch.testing.assert_close(ran, want(x), rtol=0, atol=0)


def test_float16_ops_between_int8_linears_as_pytorch():
    mapping = QConfigMapping().set_global(float16_static_qconfig) \
        .set_object_type(F.linear, default_qconfig)
    g = torch.Generator().manual_seed(3)
    inputs = [(torch.randn(2, 4, generator=g) * 2,) for _ in range(3)]
    mine, want = _check_as_pytorch(Int8LinearsAroundFloat16().eval(), mapping, inputs[0],
                                   inputs)
    # The reshape reads the float16 tensor (its cast after it dropped); the sigmoid, a
    # fixed-qparams op, keeps its casts in float16, as PyTorch lowers them.
    assert _casts_and_quantizes(mine)["to"] == 3
    assert _casts_and_quantizes(mine)[str(torch.ops.quantized.linear)] == 2
    # fuselage's runtime: the int8 linears with its kernels (PyTorch's arithmetic on the
    # engine the model records), the float16 values rounded as torch rounds them.
    for (x,), ran in zip(inputs, _runtime_outputs(mine, inputs)[0]):
        torch.testing.assert_close(ran, want(x), rtol=0, atol=1e-6)


def test_float16_cast_is_refused_where_it_cannot_run():
    """The runtime's cast takes float32 inputs and casts to float16 or float32 only; any
    other is an error naming the dtype, not a wrong value."""
    class ToInt(nn.Module):
        def forward(self, x):
            return x.to(torch.int64) + 1

    m = _core.from_torch(torch.fx.symbolic_trace(ToInt()), (torch.ones(2),))
    with pytest.raises(_core.EngineError, match="int64"):
        _core.run(m, [torch.ones(2).numpy()])


def test_float16_through_the_engines_own_pipeline():
    """The pipeline `fuselage quantize` runs (prepare, calibration in fuselage's
    interpreter, convert, lower) with the translated mapping and backend config gives
    PyTorch's converted model's outputs, also from the model file and back in torch."""
    from fuselage._translate import backend_config_to_text, qconfig_mapping_to_text

    mapping = QConfigMapping().set_global(float16_static_qconfig) \
        .set_object_type(F.linear, default_qconfig)
    model = Int8LinearsAroundFloat16().eval()
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(8)) * 2
    _, theirs = _prepare_both(model, mapping, (x,))
    want = _convert(torch_qfx, theirs, reference=False)
    m = _core.from_torch(model)
    report = _core.quantize(m, [[x.numpy()]], config_text=backend_config_to_text(BACKEND),
                            qconfig_mapping_text=qconfig_mapping_to_text(mapping))
    # The casts left: the one the reshape reads (its cast after it dropped) and the
    # sigmoid's input and output.
    assert report.lowering.float16_casts_kept == 3
    with torch.no_grad():
        expected = want(x)
    torch.testing.assert_close(torch.from_numpy(_core.run(m, [x.numpy()])[0]), expected,
                               rtol=0, atol=1e-6)
    reread = _core.Model.from_bytes(m.to_bytes())
    with torch.no_grad():
        torch.testing.assert_close(_core.to_torch(reread)(x), expected, rtol=0, atol=0)
