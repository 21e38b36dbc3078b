"""Ops the engine cannot run, kept as opaque float nodes (issue 41 item 4): `operator.eq`,
`torch._assert`, a user's @torch.fx.wrap function, and outputs nesting dicts in lists.
PyTorch's prepare_fx / convert_fx pass them through; fuselage's export refused them
(ExportError naming the node). Each test runs PyTorch's flow and fuselage's on the same
model and compares what the user sees: the call kept (the same callable), observers only
where PyTorch puts them, the same quantize / dequantize nodes, the same outputs."""

import copy
import operator

import pytest
import torch
import torch.ao.quantization.quantize_fx as torch_qfx
import torch.fx
import torch.nn as nn
from torch.ao.quantization import QConfigMapping, default_qconfig

import fuselage.quantize_fx as qfx


@torch.fx.wrap
def split_channels(x):
    """A user's function torch.fx does not trace into, returning a list (not a tensor)."""
    return list(torch.split(x, 1, 1))


def _flow(quantize_fx, model, example, batches):
    mapping = QConfigMapping().set_global(default_qconfig)
    prepared = quantize_fx.prepare_fx(copy.deepcopy(model), mapping, (example,))
    with torch.no_grad():
        for x in batches:
            prepared(x)
    # A copy: PyTorch 1.13's convert_fx swaps the prepared model's modules for reference
    # ones in place.
    return copy.deepcopy(prepared), quantize_fx.convert_fx(prepared)


def _batches(shape, n=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(shape, generator=g) for _ in range(n)]


def _calls(gm, target):
    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is target]


def _count(gm, op, target):
    return sum(1 for n in gm.graph.nodes if n.op == op and n.target == target)


class WrappedFunction(nn.Module):
    def forward(self, x):
        x = split_channels(x)
        return x[0] + 1, x[1]


def test_a_wrapped_function_is_kept_and_its_list_is_not_observed():
    # PyTorch 1.13's test_no_obs_between_unmatched_node_and_copy_node: an observer on the
    # function's list output would fail at calibration.
    torch.manual_seed(0)
    model = WrappedFunction().eval()
    batches = _batches((4, 4, 4, 4))
    theirs = _flow(torch_qfx, model, batches[0], batches)
    ours = _flow(qfx, model, batches[0], batches)
    for (their_gm, our_gm) in zip(theirs, ours):
        (their_call,), (our_call,) = _calls(their_gm, split_channels), \
            _calls(our_gm, split_channels)
        assert [(u.op, u.target) for u in our_call.users] == \
            [(u.op, u.target) for u in their_call.users] == \
            [("call_function", operator.getitem)] * 2
    x = torch.rand(4, 4, 4, 4)
    for got, expected in zip(ours[1](x), theirs[1](x)):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


class AssertOnSize(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 1, 1)

    def forward(self, x):
        x = self.conv1(x)
        torch._assert(x.size(0) == 4, "a batch of 4")
        return x


def test_an_assert_after_a_quantized_layer_is_kept_and_still_checks():
    # PyTorch 1.13's test_assert_on_size_after_quant_layer; the assert depends on the
    # input here, so a dropped call (dead-code elimination of a node without users) shows.
    torch.manual_seed(0)
    model = AssertOnSize().eval()
    batches = _batches((4, 1, 4, 4))
    theirs = _flow(torch_qfx, model, batches[0], batches)[1]
    ours = _flow(qfx, model, batches[0], batches)[1]
    assert len(_calls(ours, torch._assert)) == len(_calls(theirs, torch._assert)) == 1
    assert len(_calls(ours, operator.eq)) == len(_calls(theirs, operator.eq)) == 1
    x = torch.rand(4, 1, 4, 4)
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)
    for converted in (theirs, ours):
        with pytest.raises(AssertionError, match="a batch of 4"):
            converted(torch.rand(3, 1, 4, 4))


class ShapeBetweenConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 2, 2)
        self.conv2 = nn.Conv2d(2, 2, 2)

    def forward(self, x):
        x = self.conv1(x)
        s = x.shape
        torch._assert(s == x.shape, "")
        return self.conv2(x)


def test_a_shape_comparison_does_not_dequantize_between_quantized_convs():
    # PyTorch 1.13's test_shape_followed_by_quantized_op: one quantize, one dequantize.
    torch.manual_seed(0)
    model = ShapeBetweenConvs().eval()
    batches = _batches((2, 2, 4, 4))
    theirs = _flow(torch_qfx, model, batches[0], batches)[1]
    ours = _flow(qfx, model, batches[0], batches)[1]
    for gm in (theirs, ours):
        assert _count(gm, "call_function", torch.quantize_per_tensor) == 1
        assert _count(gm, "call_method", "dequantize") == 1
        assert len(_calls(gm, operator.eq)) == 1
    x = torch.rand(2, 2, 4, 4)
    torch.testing.assert_close(ours(x), theirs(x), rtol=0, atol=0)


class NestedOutputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 1, 1)

    def forward(self, x):
        x = self.conv(x)
        return {"foo": [x]}, [{"foo": [[x]]}]


def _structure(value):
    """The containers of `value` and their keys, tensors replaced by their shapes."""
    if isinstance(value, dict):
        return {k: _structure(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_structure(v) for v in value)
    return tuple(value.shape)


def _leaves(value):
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def test_dicts_nested_in_lists_come_out_as_pytorchs():
    # PyTorch 1.13's test_output_lists_and_dicts.
    torch.manual_seed(0)
    model = NestedOutputs().eval()
    batches = _batches((1, 1, 2, 2))
    theirs = _flow(torch_qfx, model, batches[0], batches)
    ours = _flow(qfx, model, batches[0], batches)
    x = torch.rand(1, 1, 2, 2)
    # The prepared models are float; the converted ones agree to within a hundredth of
    # their output step (fuselage's output scale is not rounded to float32).
    steps = (0.0, theirs[1].conv.scale * 1e-2)
    for their_gm, our_gm, step in zip(theirs, ours, steps):
        got, expected = our_gm(x), their_gm(x)
        assert _structure(got) == _structure(expected) == \
            ({"foo": [(1, 1, 2, 2)]}, [{"foo": [[(1, 1, 2, 2)]]}])
        for g, e in zip(_leaves(got), _leaves(expected)):
            torch.testing.assert_close(g, e, rtol=0, atol=step)
