"""Fusion patterns written over ONNX ops in a fuselage config file (issue 37 item 2):
`onnx.Conv`, `onnx.Add`, `onnx.Relu | onnx.Clip` name the ops of the ONNX model, resolved
to the forms fuselage.from_onnx gives them (patterns/onnx_ops.h): one pattern language, one
matcher. fuselage.onnx.quantize_static(..., backend_config=PATH) honours the file; the
expectations are ONNX Runtime's (its float outputs and what it fuses the QDQ file into).
"""
import collections

import numpy as np
import pytest
import torch
import torch.nn as nn

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

import fuselage  # noqa: E402
import fuselage.nn.quantized  # noqa: E402
import fuselage.onnx  # noqa: E402
from fuselage.errors import FuselageError  # noqa: E402
from fuselage.onnx import _quantize  # noqa: E402
from onnx_calibration import Reader, sqnr  # noqa: E402

SHAPE = (1, 8, 16, 16)

DTYPES = """
  dtype_config {
    input { dtype: "quint8" }
    output { dtype: "quint8" }
    weight { dtype: "qint8" }
    bias: "float32"
  }"""

CONFIG = f"""
base: "native"
name: "onnx_conv_add_relu"
pattern {{
  name: "onnx_conv_add_act"
  pattern: "({{ACT}}, (onnx.Add, onnx.Conv, MatchAllNode))"
  fuser: WRAP_IN_SEQUENCE
  fused_module: "ConvAddReLU2d"
  root: "0.0"          # the conv: the fused module takes its input first
  extra_input: "0.1"   # the residual, second{DTYPES}
}}
pattern {{
  pattern: "nni.ConvAddReLU2d"
  root_module: "Conv2d"
  reference_quantized_module: "Conv2d"{DTYPES}
}}
"""


class Residual(nn.Module):
    """Two residual blocks: relu(conv(x) + x), exported as a Relu, then
    clamp(conv(y) + y, min=0, max=high), exported as a Clip (from_onnx reads Clip(0, inf)
    as a ReLU, Clip(0, 6) as a ReLU6)."""

    def __init__(self, high=None):
        super().__init__()
        self.high = high
        self.a = nn.Conv2d(8, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = torch.relu(self.a(x) + x)
        return torch.clamp(self.b(y) + y, min=0, max=self.high)


def exported(tmp_path, high=None):
    torch.manual_seed(0)
    path = tmp_path / "residual.onnx"
    torch.onnx.export(Residual(high).eval(), (torch.randn(SHAPE),), str(path), dynamo=False,
                      opset_version=17, input_names=["x"])
    return str(path)


def ort_outputs(path, samples, level=ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
                optimized=None):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = level
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
    s = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return np.concatenate([s.run(None, {"x": x})[0] for x in samples])


def config_file(tmp_path, act):
    path = tmp_path / "onnx_patterns.textproto"
    path.write_text(CONFIG.replace("{ACT}", act))
    return str(path)


def test_a_pattern_over_onnx_ops_fuses_and_onnx_runtime_runs_it(tmp_path):
    model = exported(tmp_path)
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(4)]
    test = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2)]
    settings = dict(per_channel=True, activation_type="QUInt8", weight_type="QInt8")
    config = config_file(tmp_path, "onnx.Relu | onnx.Clip")

    proto, lowered = _quantize.quantize_with_model(model, Reader("x", calibration), **settings,
                                                   backend_config=config)
    assert {n.op_type for n in onnx.load(model).graph.node} >= {"Relu", "Clip"}
    fused = [m for m in lowered.modules()
             if isinstance(m, fuselage.nn.quantized.ConvAddReLU2d)]
    # Both blocks, by the user's pattern: the Clip(0, inf) is the ReLU from_onnx made of it,
    # which onnx.Relu names too (one internal form per op).
    assert len(fused) == 2, lowered.code
    _, native = _quantize.quantize_with_model(model, Reader("x", calibration), **settings)
    assert not any(isinstance(m, fuselage.nn.quantized.ConvAddReLU2d)
                   for m in native.modules())  # PyTorch's native config does not fuse them

    path = tmp_path / "residual.qdq.onnx"
    fuselage.onnx.quantize_static(model, str(path), Reader("x", calibration), **settings,
                                  backend_config=config)
    assert path.read_bytes() == proto.SerializeToString()
    ours = ort_outputs(path, test, optimized=tmp_path / "optimized.onnx")
    ops = collections.Counter(n.op_type
                              for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node)
    # ORT has no conv-add kernel: each fused block is a QLinearConv then a QLinearAdd
    # (both inputs quantized), nothing left in float.
    assert ops["QLinearConv"] == 2 and ops["QLinearAdd"] == 2, ops
    assert ops["Conv"] == ops["Add"] == ops["Relu"] == 0, ops
    reference = ort_outputs(model, test, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert sqnr(reference, ours) > 25, sqnr(reference, ours)


def test_a_pattern_over_an_unknown_onnx_op_names_it(tmp_path):
    model = exported(tmp_path)
    config = config_file(tmp_path, "onnx.Einsum")
    calibration = [np.zeros(SHAPE, np.float32)]
    out = tmp_path / "out.onnx"
    with pytest.raises(FuselageError, match=r"unknown pattern leaf 'onnx\.Einsum': not an ONNX "
                                            r"op fuselage reads"):
        fuselage.onnx.quantize_static(model, str(out), Reader("x", calibration),
                                      backend_config=config)
    assert not out.exists()


def test_a_match_the_fused_type_cannot_hold_is_an_error_naming_it(tmp_path):
    # onnx.Clip is ReLU6 | ReLU | Hardtanh | torch.clamp; the config loads, since ReLU fits
    # ConvAddReLU2d, and the Clip(0, 6) block's ReLU6 is refused where it matched, before
    # the graph changes (it was a Verify failure after fusion).
    model = exported(tmp_path, high=6.0)
    sample = [np.zeros(SHAPE, np.float32)]
    settings = dict(per_channel=True, activation_type="QUInt8", weight_type="QInt8")
    _, lowered = _quantize.quantize_with_model(
        model, Reader("x", sample), **settings,
        backend_config=config_file(tmp_path, "onnx.Relu"))
    assert sum(isinstance(m, fuselage.nn.quantized.ConvAddReLU2d)
               for m in lowered.modules()) == 1  # onnx.Relu alone leaves the ReLU6 block
    config = config_file(tmp_path, "onnx.Relu | onnx.Clip")
    out = tmp_path / "out.onnx"
    with pytest.raises(FuselageError, match=r"nni\.ConvAddReLU2d.*child '1' is a nn\.ReLU6; "
                                            r"expected nn\.ReLU"):
        fuselage.onnx.quantize_static(model, str(out), Reader("x", sample), **settings,
                                      backend_config=config)
    assert not out.exists()
