"""`x + 3`, `3 * x` and their relu forms in fuselage.quantize_fx as in PyTorch's FX flow
(PyTorch 1.13's test_quantize_fx.py: test_add / test_mul / test_add_relu / test_mul_relu
with is_scalar, test_sub_scalar): convert lowers them to torch.ops.quantized.add / mul
[_relu](qx, number) (or (number, qx)) and drops the quantize after them, since ATen's
add_scalar / mul_scalar make their own output parameters. Before, the reference pattern
stayed and the quantize after `x + 3`, observed with x's shared observer, clamped the sum
to x's range: a silently wrong result. fuselage's own runtime computes ATen's arithmetic
for those ops (checked against torch.ops.quantized on every branch of it)."""

import copy
import operator
import warnings

import pytest
import torch
import torch.ao.quantization.quantize_fx as torch_qfx
import torch.fx
import torch.nn as nn
from torch.ao.quantization import get_default_qconfig_mapping

import fuselage.quantize_fx as qfx
from conftest import x86_engine
from fuselage import _core
from fx_both import engine


class ScalarOps(nn.Module):
    """A conv, then `op` with a number on either side (and a relu after each if asked),
    then a sub, which stays float: PyTorch quantizes no sub."""

    def __init__(self, op, relu, number):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 1)
        self.op, self.relu, self.number = op, relu, number

    def forward(self, x):
        x = self.conv(x)
        x = self.op(x, self.number)
        if self.relu:
            x = torch.relu(x)
        x = self.op(self.number, x)
        if self.relu:
            x = nn.functional.relu(x)
        return x - 1


def _quantize(quantize_fx, model, example):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        prepared = quantize_fx.prepare_fx(copy.deepcopy(model),
                                          get_default_qconfig_mapping("fbgemm"), (example,))
        with torch.no_grad():
            for seed in range(3):
                prepared(torch.randn(example.shape,
                                     generator=torch.Generator().manual_seed(seed)))
        return quantize_fx.convert_fx(prepared)


def _calls(gm):
    """The graph's call targets in order (functions by name)."""
    return [getattr(n.target, "__name__", str(n.target)) if n.op == "call_function"
            else str(n.target) for n in gm.graph.nodes
            if n.op in ("call_function", "call_method", "call_module")]


@pytest.mark.parametrize("op,relu,number", [
    (operator.add, False, 3), (operator.add, True, 3), (operator.mul, False, 3),
    (operator.mul, True, 3), (torch.add, False, 0.5), (torch.mul, True, -2.0),
    (operator.mul, False, 0)])
def test_binary_ops_with_a_number_lower_as_pytorch(op, relu, number):
    torch.manual_seed(0)
    model = ScalarOps(op, relu, number).eval()
    example = torch.randn(1, 2, 5, 5)
    with engine(x86_engine()):
        ours = _quantize(qfx, model, example)
        theirs = _quantize(torch_qfx, model, example)
        name = ("add" if op in (operator.add, torch.add) else "mul") + ("_relu" if relu else "")
        native = getattr(torch.ops.quantized, name)
        targets = [n.target for n in ours.graph.nodes if n.op == "call_function"]
        assert targets.count(native) == 2, ours.code
        assert [n.target for n in theirs.graph.nodes if n.op == "call_function"].count(
            native) == 2, theirs.code
        # PyTorch's graph: the number where the user put it, no output qparams, no
        # quantize after the op, one dequantize before the sub.
        ours_args = [n.args for n in ours.graph.nodes if n.target is native]
        theirs_args = [n.args for n in theirs.graph.nodes if n.target is native]
        assert [tuple(a if not isinstance(a, torch.fx.Node) else "node" for a in args)
                for args in ours_args] == \
            [tuple(a if not isinstance(a, torch.fx.Node) else "node" for a in args)
             for args in theirs_args]
        assert targets.count(torch.quantize_per_tensor) == 1, ours.code
        for seed in range(3):
            x = torch.randn(1, 2, 5, 5, generator=torch.Generator().manual_seed(10 + seed)) * 2
            want = theirs(x)
            assert torch.equal(ours(x), want)
            # fuselage's runtime on the same converted model.
            got = torch.from_numpy(_core.run(_core.from_torch(ours), [x.numpy()])[0])
            assert torch.equal(got, want), (got - want).abs().max()


def test_sub_scalar_as_pytorch():
    # test_sub_scalar: x + 1 lowered, x - 1 float, x + 3 lowered, x - 4 float.
    class M(nn.Module):
        def forward(self, x):
            x = x + 1
            x = x - 1
            x = x + 3
            return x - 4

    example = torch.rand(3)
    ours, theirs = (_quantize(q, M().eval(), example) for q in (qfx, torch_qfx))
    assert _calls(ours).count("quantize_per_tensor") == 2, ours.code
    assert _calls(ours).count("dequantize") == 2, ours.code
    assert _calls(ours) == _calls(theirs)
    x = torch.rand(3) * 4 - 2
    assert torch.equal(ours(x), theirs(x))


class _ScalarOpGraph(nn.Module):
    """quantize(x) → torch.ops.quantized.<name>(qx, number) or (number, qx) → dequantize."""

    def __init__(self, name, number, first, scale, zero_point, dtype):
        super().__init__()
        self.name, self.number, self.first = name, number, first
        self.scale, self.zero_point, self.dtype = scale, zero_point, dtype

    def forward(self, x):
        q = torch.quantize_per_tensor(x, self.scale, self.zero_point, self.dtype)
        op = getattr(torch.ops.quantized, self.name)
        y = op(self.number, q) if self.first else op(q, self.number)
        return y.dequantize()


# Every branch of ATen's _add_scalar_out (the number moves the zero point only; past the
# lowest / highest zero point it requantizes) and _mul_scalar_out (> 0, 0, < 0).
@pytest.mark.parametrize("name,number,scale,zero_point,dtype", [
    ("add", 3, 0.05, 128, torch.quint8),        # zero point 68: copied
    ("add", 20.0, 0.05, 100, torch.quint8),     # c_q 400 > zp: requantized, zp 0
    ("add", -20.0, 0.05, 100, torch.quint8),    # zp past 255: requantized, zp 255
    ("add_relu", 1.5, 0.02, 10, torch.quint8),
    ("add_relu", -9.0, 0.02, 10, torch.quint8),
    ("add", -0.73, 0.013, -5, torch.qint8),
    ("add_relu", 4.0, 0.01, 3, torch.qint8),
    ("mul", 2.5, 0.03, 120, torch.quint8),
    ("mul", 0, 0.03, 120, torch.quint8),
    ("mul", -1.5, 0.03, 120, torch.quint8),
    ("mul_relu", 2.0, 0.03, 90, torch.quint8),
    ("mul_relu", -3.0, 0.03, 90, torch.quint8),
    ("mul_relu", -0.5, 0.02, 7, torch.qint8),
])
@pytest.mark.parametrize("first", [False, True])
def test_the_runtimes_scalar_add_and_mul_are_atens(name, number, scale, zero_point, dtype,
                                                   first):
    gm = torch.fx.symbolic_trace(_ScalarOpGraph(name, number, first, scale, zero_point, dtype))
    x = torch.randn(4, 37, generator=torch.Generator().manual_seed(5)) * 4
    want = gm(x)
    got = torch.from_numpy(_core.run(_core.from_torch(gm), [x.numpy()])[0])
    assert torch.equal(got, want), (got - want).abs().max()


class AddWithAlpha(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Conv2d(2, 3, 1), nn.Conv2d(2, 3, 1)

    def forward(self, x):
        return torch.add(self.a(x), self.b(x), alpha=2), torch.add(self.a(x), 3, alpha=2)


def test_an_add_with_alpha_stays_float_and_runs():
    # quantized.add has no alpha. PyTorch 1.13 lowers torch.add(a, b, alpha=2) to
    # quantized.add(qa, qb, scale, zp) and drops alpha (a wrong result); fuselage kept the
    # kwarg, a call PyTorch's quantized.add refuses. Now both adds stay reference patterns.
    torch.manual_seed(0)
    model = AddWithAlpha().eval()
    example = torch.randn(1, 2, 5, 5)
    with engine(x86_engine()):
        ours = _quantize(qfx, model, example)
        assert torch.ops.quantized.add not in [n.target for n in ours.graph.nodes], ours.code
        x = torch.randn(1, 2, 5, 5, generator=torch.Generator().manual_seed(4))
        for got, want in zip(ours(x), model(x)):
            assert (got - want).abs().max() < 0.1 * want.abs().max(), (got - want).abs().max()
