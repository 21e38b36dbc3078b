"""Dynamic quantization of nn.LSTM and nn.GRU through fuselage.quantize_fx (issue 38 item 3).

default_dynamic_qconfig, per_channel_dynamic_qconfig and float16_dynamic_qconfig on an
LSTM / GRU go through fuselage's prepare (the input observed by PyTorch's dynamic
PlaceholderObserver), convert (nnqr.LSTM / nnqr.GRU holding each weight's own parameters,
weight_ih_l0_scale, ...) and lowering (nnqd.LSTM / nnqd.GRU); to_torch gives PyTorch's
torch.ao.nn.quantized.dynamic modules. Each case runs PyTorch's own flow on a copy of the
same model with the same mapping and backend config, on the same engine, and checks:
  - the converted models hold the same module types at the same places, and the dynamic
    modules the same quantized weights and float biases, so both give the same outputs;
  - fuselage's runtime (runtime/quantized/dynamic_rnn.h) gives PyTorch's outputs, final
    hidden (and cell) states within 1e-5 of their largest magnitude (RTOL, the issue's
    figure). That needs PyTorch's own sigmoid and tanh (runtime/quantized/aten_math.h):
    the hidden state is requantized at every step with a scale from its own range, so a
    value one ulp off a rounding boundary moves a quantization step and every later
    output with it (with libm's expf / tanhf, 4.8e-4 and 8.4e-4 of the largest output
    were measured on the per-channel qnnpack LSTMs below). Measured now: at most 2.3e-7
    (PyTorch 2.14's wheel computes tanh with MKL, which differs from Sleef in the last bit
    for ~1 % of values; on 1.13 most cases are equal).
PyTorch 1.13's backend config has no nn.GRU: there both flows keep it float.
"""
import copy
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn
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
DYNAMIC = (torch.ao.nn.quantized.dynamic.LSTM, torch.ao.nn.quantized.dynamic.GRU)


class Recurrent(nn.Module):
    """A 2-layer LSTM or GRU whose output and final states are all model outputs."""

    def __init__(self, cls, bidirectional, batch_first=True):
        super().__init__()
        self.rnn = cls(8, 12, num_layers=2, batch_first=batch_first, bidirectional=bidirectional)
        self.lstm = cls is nn.LSTM

    def forward(self, x):
        out = self.rnn(x)  # indexed, not unpacked: PyTorch 1.13's tracer cannot unpack
        if self.lstm:
            return out[0], out[1][0], out[1][1]
        return out[0], out[1]


def check_close(got, want):
    """Every element within RTOL of want's largest magnitude."""
    assert relative_error(got, want) <= RTOL


QCONFIGS = {"per_tensor": default_dynamic_qconfig, "per_channel": per_channel_dynamic_qconfig,
            "float16": float16_dynamic_qconfig}
CASES = [(cls, qconfig, backend, bidirectional) for cls in ("LSTM", "GRU")
         for qconfig in QCONFIGS for backend in ("x86", "qnnpack")
         for bidirectional in (False, True)
         if not (qconfig == "float16" and backend == "qnnpack")]


@pytest.mark.parametrize("cls_name,qconfig_name,backend,bidirectional", CASES)
def test_dynamic_rnn_converts_and_runs_like_pytorch(cls_name, qconfig_name, backend,
                                                    bidirectional):
    torch_engine = x86_engine() if backend == "x86" else "qnnpack"
    if qconfig_name == "float16" and torch_engine != "fbgemm":
        pytest.skip(f"PyTorch has no float16 linear prepack on {torch_engine}")
    torch.manual_seed(0)
    cls = getattr(nn, cls_name)
    model = Recurrent(cls, bidirectional).eval()
    example = torch.randn(3, 6, 8) * 2
    mapping = QConfigMapping().set_object_type(cls, QCONFIGS[qconfig_name])
    backend_config = get_native_backend_config() if backend == "x86" else \
        get_qnnpack_backend_config()
    with engine(torch_engine):
        ours, theirs = quantize_both(model, mapping, example, backend_config)
        assert leaf_types(ours) == leaf_types(theirs)
        quantized = isinstance(theirs.rnn, DYNAMIC)
        if quantized:
            a, b = ours.rnn, theirs.rnn
            assert a.dtype == b.dtype
            wa, wb = a.get_weight(), b.get_weight()
            assert wa.keys() == wb.keys()
            for name in wa:
                if wb[name].is_quantized:
                    assert torch.equal(wa[name].int_repr(), wb[name].int_repr()), name
                    assert wa[name].qscheme() == wb[name].qscheme(), name
                assert torch.equal(wa[name].dequantize(), wb[name].dequantize()), name
            ba, bb = a.get_bias(), b.get_bias()
            assert ba.keys() == bb.keys()
            for name in ba:
                assert torch.equal(ba[name], bb[name]), name
        else:
            # PyTorch 1.13's config has no nn.GRU: both keep it float.
            assert cls_name == "GRU" and torch.__version__ < "2", leaf_types(theirs)
        fuselage_engine = "qnnpack" if backend == "qnnpack" else "onednn"
        model_file = _core.from_torch(ours)
        for seed in range(3):
            x = torch.randn(3, 6, 8, generator=torch.Generator().manual_seed(seed)) * (seed + 1)
            want = theirs(x)
            for got, expected in zip(ours(x), want):
                assert torch.equal(got, expected)
            if not quantized:
                continue  # fuselage's runtime has no float LSTM / GRU kernel
            outputs = _core.run(model_file, [x.numpy()], engine=fuselage_engine)
            assert len(outputs) == len(want)
            for got, expected in zip(outputs, want):
                check_close(torch.from_numpy(got), expected.detach())


def test_dynamic_lstm_sequence_first_with_an_initial_state():
    """batch_first=False, and (h0, c0) given: PyTorch observes only the input, and the
    initial state goes to nnqd.LSTM as it is."""

    class WithState(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(8, 12, num_layers=2)

        def forward(self, x, h0, c0):
            return self.rnn(x, (h0, c0))[0]

    torch.manual_seed(0)
    model = WithState().eval()
    example = (torch.randn(5, 2, 8), torch.randn(2, 2, 12), torch.randn(2, 2, 12))
    mapping = QConfigMapping().set_object_type(nn.LSTM, default_dynamic_qconfig)
    backend_config = get_qnnpack_backend_config()
    with engine("qnnpack"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = torch_convert_fx(torch_prepare_fx(copy.deepcopy(model), mapping, example,
                                                   backend_config=backend_config),
                                  backend_config=backend_config)
        ours = prepare_fx(copy.deepcopy(model), mapping, example, backend_config=backend_config)
        ours(*example)
        ours = convert_fx(ours, backend_config=backend_config)
        assert leaf_types(ours) == leaf_types(theirs)
        assert isinstance(ours.rnn, torch.ao.nn.quantized.dynamic.LSTM)
        want = theirs(*example)
        assert torch.equal(ours(*example), want)
        got = _core.run(_core.from_torch(ours), [t.numpy() for t in example],
                        engine="qnnpack")[0]
        check_close(torch.from_numpy(got), want)


def test_lstm_with_a_projection_stays_float():
    """nnqd.LSTM has no proj_size: fuselage keeps such an LSTM float (and says why)."""
    torch.manual_seed(0)

    class Projected(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.LSTM(8, 12, proj_size=4)

        def forward(self, x):
            return self.rnn(x)[0]

    model = Projected().eval()
    x = torch.randn(5, 2, 8)
    mapping = QConfigMapping().set_object_type(nn.LSTM, default_dynamic_qconfig)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = prepare_fx(copy.deepcopy(model), mapping, (x,))
        ours(x)
        ours = convert_fx(ours)
    assert type(ours.rnn) is nn.LSTM
    assert torch.equal(ours(x), model(x))


def test_dynamic_lstm_runtime_rejects_a_wrong_input():
    torch.manual_seed(0)
    model = Recurrent(nn.LSTM, False).eval()
    example = torch.randn(3, 6, 8)
    mapping = QConfigMapping().set_object_type(nn.LSTM, default_dynamic_qconfig)
    with engine("qnnpack"):
        ours, _ = quantize_both(model, mapping, example, get_qnnpack_backend_config())
    model_file = _core.from_torch(ours)
    with pytest.raises(_core.EngineError, match=r"nnqd.LSTM: input has shape \[3, 6, 5\]"):
        _core.run(model_file, [np.zeros((3, 6, 5), np.float32)], engine="qnnpack")
    with pytest.raises(_core.EngineError, match=r"expected \[batch, seq_len, 8\]"):
        _core.run(model_file, [np.zeros((6, 8), np.float32)], engine="qnnpack")
