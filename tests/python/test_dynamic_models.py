"""Dynamic and weight-only quantization of whole models (issue 38 item 5).

Two models go through fuselage.quantize_fx and through PyTorch's own prepare_fx /
convert_fx with the same QConfigMapping and backend config, on the same engine:
  - a classifier on a 2-layer nn.TransformerEncoder, its Linears dynamic;
  - a language model: nn.Embedding (weight-only, float_qparams_weight_only_qconfig), a
    2-layer nn.LSTM and a Linear decoder (dynamic).
Checked: the same modules quantized to the same types, with the same weights, so the
converted models give the same outputs in PyTorch; and fuselage's runtime gives those
outputs within 1e-5 of their largest magnitude (the issue's figure).
"""
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.ao.quantization import (QConfigMapping, default_dynamic_qconfig,
                                   float_qparams_weight_only_qconfig)
from torch.ao.quantization.backend_config import (get_native_backend_config,
                                                  get_qnnpack_backend_config)

from fuselage import _core
from fx_both import engine, leaf_types, quantize_both, relative_error
from conftest import x86_engine

RTOL = 1e-5


class EncoderClassifier(nn.Module):
    """A 2-layer nn.TransformerEncoder (post-norm, relu, no dropout) and a Linear head on
    the mean over the sequence. The forward is the encoder's, written out over its own
    modules so that torch.fx traces into the layers (PyTorch's QuantizationTracer keeps
    nn.TransformerEncoder, and nn.MultiheadAttention, whole as float leaves, where no
    Linear of theirs is quantized): self-attention by F.linear on self_attn's in_proj and
    out_proj parameters (float in both flows, as eager quantize_dynamic keeps out_proj),
    linear1 / linear2 / head nn.Linear calls. test_encoder_forward_is_pytorchs checks it
    against nn.TransformerEncoder's own forward."""

    def __init__(self, d_model=32, heads=4, ff=64, classes=5):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, classes)
        self.heads = heads
        self.head_dim = d_model // heads

    def attention(self, attn, x):
        batch, seq = x.size(0), x.size(1)
        qkv = F.linear(x, attn.in_proj_weight, attn.in_proj_bias)
        parts = qkv.chunk(3, dim=-1)  # indexed: PyTorch 1.13's tracer cannot unpack
        q, k, v = parts[0], parts[1], parts[2]
        q = q.reshape(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = k.reshape(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        v = v.reshape(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        y = torch.matmul(torch.softmax(scores, dim=-1), v)
        y = y.transpose(1, 2).reshape(batch, seq, self.heads * self.head_dim)
        return F.linear(y, attn.out_proj.weight, attn.out_proj.bias)

    def forward(self, x):
        for layer in self.encoder.layers:
            x = layer.norm1(x + self.attention(layer.self_attn, x))
            x = layer.norm2(x + layer.linear2(torch.relu(layer.linear1(x))))
        return self.head(x.mean(dim=1))


class LstmLanguageModel(nn.Module):
    """Embedding -> 2-layer LSTM -> Linear over the vocabulary, at every position."""

    def __init__(self, vocab=60, dim=16, hidden=24):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, batch_first=True)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        return self.decoder(self.lstm(self.embed(tokens))[0])


def same_weights(a, b):
    """Both modules' quantized weights (and biases) equal."""
    if hasattr(a, "get_weight"):  # nnqd.LSTM / GRU
        wa, wb = a.get_weight(), b.get_weight()
        assert wa.keys() == wb.keys()
        pairs = [(wa[k], wb[k]) for k in wa]
        ba, bb = a.get_bias(), b.get_bias()
        assert all(torch.equal(ba[k], bb[k]) for k in ba)
    else:
        pairs = [(a.weight(), b.weight())]
        if getattr(a, "bias", None) is not None and callable(a.bias):
            assert torch.equal(a.bias(), b.bias())
    for x, y in pairs:
        assert torch.equal(x.int_repr(), y.int_repr())
        assert torch.equal(x.dequantize(), y.dequantize())


BACKENDS = ("x86", "qnnpack")


def setup(backend):
    torch_engine = x86_engine() if backend == "x86" else "qnnpack"
    backend_config = get_native_backend_config() if backend == "x86" else \
        get_qnnpack_backend_config()
    return torch_engine, backend_config, "qnnpack" if backend == "qnnpack" else "onednn"


def test_encoder_forward_is_pytorchs():
    torch.manual_seed(0)
    model = EncoderClassifier().eval()
    x = torch.randn(2, 7, 32)
    want = model.head(model.encoder(x).mean(dim=1))
    assert relative_error(model(x), want) <= 1e-5


@pytest.mark.parametrize("backend", BACKENDS)
def test_transformer_encoder_classifier_dynamic(backend):
    torch.manual_seed(0)
    model = EncoderClassifier().eval()
    example = torch.randn(2, 7, 32)
    mapping = QConfigMapping().set_object_type(nn.Linear, default_dynamic_qconfig)
    torch_engine, backend_config, fuselage_engine = setup(backend)
    with engine(torch_engine):
        ours, theirs = quantize_both(model, mapping, example, backend_config)
        types = leaf_types(theirs)
        assert leaf_types(ours) == types
        dynamic = [name for name, t in types.items()
                   if t is torch.ao.nn.quantized.dynamic.Linear]
        assert len(dynamic) == 5, types  # linear1, linear2 of both layers, and the head
        for name in dynamic:
            same_weights(ours.get_submodule(name), theirs.get_submodule(name))
        model_file = _core.from_torch(ours)
        for seed in range(3):
            x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(seed))
            want = theirs(x)
            assert torch.equal(ours(x), want)
            got = torch.from_numpy(_core.run(model_file, [x.numpy()],
                                             engine=fuselage_engine)[0])
            assert relative_error(got, want) <= RTOL


@pytest.mark.parametrize("backend", BACKENDS)
def test_lstm_language_model_dynamic_and_weight_only(backend):
    torch.manual_seed(0)
    model = LstmLanguageModel().eval()
    example = torch.randint(0, 60, (3, 9))
    mapping = (QConfigMapping()
               .set_object_type(nn.Embedding, float_qparams_weight_only_qconfig)
               .set_object_type(nn.LSTM, default_dynamic_qconfig)
               .set_object_type(nn.Linear, default_dynamic_qconfig))
    torch_engine, backend_config, fuselage_engine = setup(backend)
    with engine(torch_engine):
        ours, theirs = quantize_both(model, mapping, example, backend_config)
        types = leaf_types(theirs)
        assert leaf_types(ours) == types
        assert types == {"embed": torch.ao.nn.quantized.Embedding,
                         "lstm": torch.ao.nn.quantized.dynamic.LSTM,
                         "decoder": torch.ao.nn.quantized.dynamic.Linear}, types
        for name in types:
            same_weights(ours.get_submodule(name), theirs.get_submodule(name))
        model_file = _core.from_torch(ours)
        for seed in range(3):
            tokens = torch.randint(0, 60, (3, 9), generator=torch.Generator().manual_seed(seed))
            want = theirs(tokens)
            assert torch.equal(ours(tokens), want)
            got = torch.from_numpy(_core.run(model_file, [tokens.numpy()],
                                             engine=fuselage_engine)[0])
            assert relative_error(got, want) <= RTOL
