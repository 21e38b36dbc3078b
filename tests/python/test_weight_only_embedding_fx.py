"""Weight-only quantized embeddings through fuselage.quantize_fx (issue 38 item 4).

float_qparams_weight_only_qconfig on nn.Embedding / nn.EmbeddingBag, given to
fuselage.quantize_fx.prepare_fx / convert_fx: prepare observes nothing in the graph,
convert quantizes each weight row to quint8 with a float scale and zero point
(torch.per_channel_affine_float_qparams, nnqr.Embedding), lowering makes nnq.Embedding /
nnq.EmbeddingBag. Each case runs PyTorch's own flow on a copy of the same model with the
same mapping and checks: the same module types in the same places, the same quantized
weight (values, scales, zero points), the same outputs; and fuselage's runtime (its
nnq.Embedding / nnq.EmbeddingBag kernels, runtime/quantized/embedding.h) within 1e-5 of
PyTorch's outputs. (PyTorch's nnq.EmbeddingBag sums whatever its mode says; so does
fuselage's, to give what PyTorch's converted model gives.)
"""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
from torch.ao.quantization import QConfigMapping, float_qparams_weight_only_qconfig
from torch.ao.quantization.backend_config import get_native_backend_config
from torch.ao.quantization.quantize_fx import convert_fx as torch_convert_fx
from torch.ao.quantization.quantize_fx import prepare_fx as torch_prepare_fx

from fuselage import _core
from fuselage.quantize_fx import convert_fx, convert_to_reference_fx, prepare_fx

RTOL = 1e-5


class Bags(nn.Module):
    """An Embedding on 2-D indices, EmbeddingBags with offsets (sum, mean, the last offset
    included) and on 2-D indices, with per-sample weights, and a float Linear after."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.bag_sum = nn.EmbeddingBag(50, 16, mode="sum")
        self.bag_mean = nn.EmbeddingBag(50, 16, mode="mean", include_last_offset=True)
        self.bag_2d = nn.EmbeddingBag(40, 16, mode="sum")
        self.fc = nn.Linear(16, 4)

    def forward(self, tokens, flat, offsets, last_offsets, weights, bags_2d):
        a = self.emb(tokens).sum(1)
        b = self.bag_sum(flat, offsets, per_sample_weights=weights)
        c = self.bag_mean(flat, last_offsets)
        d = self.bag_2d(bags_2d)
        return self.fc(a + b + c + d)


def inputs(seed):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 50, (4, 5), generator=g)
    flat = torch.randint(0, 50, (12,), generator=g)
    offsets = torch.tensor([0, 3, 3, 7])  # bag 1 is empty
    last_offsets = torch.tensor([0, 3, 3, 7, 12])
    weights = torch.rand(12, generator=g)
    bags_2d = torch.randint(0, 40, (4, 3), generator=g)
    return tokens, flat, offsets, last_offsets, weights, bags_2d


def mapping():
    return (QConfigMapping()
            .set_object_type(nn.Embedding, float_qparams_weight_only_qconfig)
            .set_object_type(nn.EmbeddingBag, float_qparams_weight_only_qconfig))


def called_types(model):
    return {n.target: type(model.get_submodule(n.target)) for n in model.graph.nodes
            if n.op == "call_module"}


def relative_error(got, want):
    return (got - want).abs().max().item() / want.abs().max().item()


def quantize_both(model, example):
    backend_config = get_native_backend_config()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch_prepare_fx(copy.deepcopy(model), mapping(), example,
                                  backend_config=backend_config)
        theirs(*example)
        theirs = torch_convert_fx(theirs, backend_config=backend_config)
        prepared = prepare_fx(copy.deepcopy(model), mapping(), example,
                              backend_config=backend_config)
        prepared(*example)
    return prepared, theirs


def test_embeddings_convert_and_run_like_pytorch():
    torch.manual_seed(0)
    model = Bags().eval()
    example = inputs(0)
    prepared, theirs = quantize_both(model, example)
    assert not [n for n in prepared.graph.nodes if "activation_post_process" in n.name]
    ours = convert_fx(prepared)
    assert called_types(ours) == called_types(theirs)
    names = [n for n, t in called_types(theirs).items()
             if t in (torch.ao.nn.quantized.Embedding, torch.ao.nn.quantized.EmbeddingBag)]
    assert len(names) == 4, called_types(theirs)
    for name in names:
        a, b = ours.get_submodule(name).weight(), theirs.get_submodule(name).weight()
        assert a.qscheme() == b.qscheme() == torch.per_channel_affine_float_qparams
        assert torch.equal(a.int_repr(), b.int_repr()), name
        assert torch.equal(a.q_per_channel_scales(), b.q_per_channel_scales()), name
        assert torch.equal(a.q_per_channel_zero_points(), b.q_per_channel_zero_points()), name
    for seed in range(3):
        x = inputs(seed)
        want = theirs(*x)
        assert torch.equal(ours(*x), want)
        got = torch.from_numpy(_core.run(_core.from_torch(ours), [t.numpy() for t in x])[0])
        assert relative_error(got, want) <= RTOL


@pytest.mark.parametrize("module_name", ["emb", "bag_sum", "bag_mean", "bag_2d"])
def test_embedding_kernels_equal_pytorchs_quantized_ops(module_name):
    """Each quantized module alone: fuselage's kernel against PyTorch's module on the same
    packed weight (embedding_byte / embedding_bag_byte), per output element."""
    torch.manual_seed(0)
    model = Bags().eval()
    example = inputs(0)
    _, theirs = quantize_both(model, example)
    module = theirs.get_submodule(module_name)
    tokens, flat, offsets, last_offsets, weights, bags_2d = inputs(5)

    calls = {"emb": (tokens,), "bag_sum": (flat, offsets, weights),
             "bag_mean": (flat, last_offsets), "bag_2d": (bags_2d,)}[module_name]
    graph = torch.fx.Graph()
    args = tuple(graph.placeholder(f"x{i}") for i in range(len(calls)))
    graph.output(graph.call_module("m", args))
    gm = torch.fx.GraphModule({"m": copy.deepcopy(module)}, graph)
    want = gm(*calls)
    got = torch.from_numpy(_core.run(_core.from_torch(gm), [t.numpy() for t in calls])[0])
    assert got.shape == want.shape
    assert relative_error(got, want) <= RTOL


def test_reference_embedding_is_pytorchs():
    torch.manual_seed(0)
    model = Bags().eval()
    example = inputs(0)
    prepared, _ = quantize_both(model, example)
    reference = convert_to_reference_fx(prepared)
    assert isinstance(reference.emb, torch.ao.nn.quantized.reference.Embedding)
    assert reference.emb.weight_qscheme == torch.per_channel_affine_float_qparams
    assert reference.emb.weight_zero_point.dtype == torch.float32
