"""fuselage.from_onnx and fuselage.onnx.quantize_static on small models (issue 37 item 2).

The expectations are ONNX Runtime's: the float GraphModule's outputs against ORT running
the same ONNX file, and the QDQ file fuselage writes against what ORT's own
quantize_static writes from the same float model and calibration data (SQNR against the
float outputs, and the int8 ops ORT fuses on load). torchvision models:
test_onnx_import_torchvision.py.
"""
import collections
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")

import fuselage  # noqa: E402
import fuselage.onnx  # noqa: E402
from fuselage.errors import OnnxImportError  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402
from conftest import REPO, SmallResidual, randomize_batch_norm  # noqa: E402
from onnx_calibration import Reader, sqnr  # noqa: E402

QuantType, QuantFormat = quantization.QuantType, quantization.QuantFormat
CalibrationMethod = quantization.CalibrationMethod


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def export(model, inputs, path, **kwargs):
    torch.onnx.export(model.eval(), inputs, str(path), dynamo=False, opset_version=17,
                      **kwargs)
    return str(path)


def ort_session(path, level=ort.GraphOptimizationLevel.ORT_DISABLE_ALL, optimized=None):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.graph_optimization_level = level
    if optimized is not None:
        options.optimized_model_filepath = str(optimized)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def ort_outputs(path, inputs, **kwargs):
    session = ort_session(path, **kwargs)
    feeds = {i.name: x.numpy() for i, x in zip(session.get_inputs(), inputs)}
    return session.run(None, feeds)


def op_types(path):
    return collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node)


def assert_same_as_onnx_runtime(path, inputs):
    gm = fuselage.from_onnx(path)
    assert isinstance(gm, torch.fx.GraphModule)
    with torch.no_grad():
        ours = gm(*inputs)
    ours = ours if isinstance(ours, tuple) else (ours,)
    theirs = ort_outputs(path, inputs)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-4, atol=1e-5)
    return gm


# ---- float models read as ONNX Runtime runs them -----------------------------------------

class Vision(nn.Module):
    """Conv, Relu, Clip, MaxPool, AveragePool, Pad, Resize, Concat, Slice, Split, Add, Mul,
    Sigmoid, HardSigmoid, HardSwish, ReduceMean, GlobalAveragePool, Flatten, Gemm, and
    x.view(x.size(0), -1)'s Shape arithmetic."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, groups=4, bias=False)
        self.conv3 = nn.Conv2d(16, 8, 1)
        self.fc = nn.Linear(8 * 4 * 4, 10)
        self.head = nn.Linear(8, 8)

    def forward(self, x):
        y = F.relu(self.conv1(x))                                   # 8x16x16
        z = F.relu6(self.conv2(y)) * torch.sigmoid(y)
        z = F.hardtanh(z, -1.0, 2.0) + F.hardswish(y) * F.hardsigmoid(y)
        w = F.max_pool2d(F.pad(z, (1, 0, 1, 0)), 3, 2, 1)           # 8x17x17 -> 8x9x9
        w = F.interpolate(w[:, :, 1:, 1:], scale_factor=2, mode="nearest")  # 8x16x16
        a, b = torch.split(w, [4, 4], dim=1)
        z = F.avg_pool2d(z, 3, 1, 1, count_include_pad=False)
        u = torch.cat([torch.cat([b, a], 1), z], 1)                 # 16x16x16
        v = F.avg_pool2d(self.conv3(u), 4)                          # 8x4x4
        pooled = F.adaptive_avg_pool2d(v, 1).flatten(1)
        return self.fc(v.view(v.size(0), -1)), self.head(pooled) + v.mean((2, 3))


class Sequence(nn.Module):
    """MatMul by a constant and between tensors, Transpose, Reshape, Softmax, Sub, Div,
    ReduceMean keeping dims, Resize (bilinear)."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(6, 6))
        self.proj = nn.Linear(6, 6)

    def forward(self, x):                      # 1 x 4 x 6
        q = x @ self.weight
        k = self.proj(x).permute(0, 2, 1)
        attention = torch.softmax(q @ k / 2.0, dim=-1)
        y = attention @ x - x.mean(-1, keepdim=True)
        image = y.reshape(1, 1, 4, 6)
        return F.interpolate(image, size=(8, 12), mode="bilinear", align_corners=False)


def test_a_vision_model_reads_as_onnx_runtime_runs_it(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(1, 3, 32, 32)
    # Without constant folding the Shape arithmetic stays in the file.
    path = export(Vision(), (x,), tmp_path / "vision.onnx", do_constant_folding=False)
    ops = op_types(path)
    for op in ("Conv", "Relu", "Clip", "MaxPool", "AveragePool", "Pad", "Resize", "Concat",
               "Slice", "Split", "Add", "Mul", "Sigmoid", "HardSigmoid", "HardSwish",
               "ReduceMean", "GlobalAveragePool", "Flatten", "Gemm", "Shape", "Gather",
               "Reshape"):
        assert ops[op] >= 1, (op, ops)
    x = torch.randn(1, 3, 32, 32)
    gm = assert_same_as_onnx_runtime(path, [x])
    # The ONNX inputs and parameters are the module's: the convs are nn.Conv2d.
    assert sum(isinstance(m, nn.Conv2d) for m in gm.modules()) == 3
    # What fuselage's engine takes: a model file, run by fuselage's own runtime.
    from fuselage import _core
    fuselage.export(gm, (x,), str(tmp_path / "vision.fsl"))
    # Each node keeps its ONNX spelling (op and node) in the file's meta.
    spelled = {n.meta["fuselage"]["onnx"] for n in fuselage.to_torch(
        str(tmp_path / "vision.fsl")).graph.nodes if "onnx" in n.meta.get("fuselage", {})}
    assert {"Conv", "Gemm", "Resize", "Pad"} <= spelled, spelled
    ours = _core.run(_core.Model.load(str(tmp_path / "vision.fsl")), [x.numpy()])
    theirs = ort_outputs(path, [x])
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-4, atol=1e-5)


def test_a_sequence_model_reads_as_onnx_runtime_runs_it(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(1, 4, 6)
    path = export(Sequence(), (x,), tmp_path / "sequence.onnx")
    ops = op_types(path)
    for op in ("MatMul", "Transpose", "Softmax", "Sub", "Div", "ReduceMean", "Reshape",
               "Resize"):
        assert ops[op] >= 1, (op, ops)
    assert_same_as_onnx_runtime(path, [torch.randn(1, 4, 6)])


@pytest.mark.parametrize("model, shape", [(Vision, (1, 3, 32, 32)), (Sequence, (1, 4, 6))])
def test_what_from_onnx_reads_to_onnx_writes_back(model, shape, tmp_path):
    # Pad, Slice (torch.narrow) and Resize (F.interpolate) go back out too.
    torch.manual_seed(0)
    path = export(model(), (torch.randn(shape),), tmp_path / "model.onnx",
                  do_constant_folding=False)
    x = torch.randn(shape)
    back = fuselage.to_onnx(fuselage.from_onnx(path), str(tmp_path / "back.onnx"), (x,))
    for a, b in zip(ort_outputs(back, [x]), ort_outputs(path, [x])):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode,transform", [("linear", "half_pixel"),
                                            ("linear", "pytorch_half_pixel"),
                                            ("nearest", "asymmetric")])
def test_a_resize_by_scales_that_are_not_out_over_in_gives_onnx_runtimes_outputs(
        mode, transform, tmp_path):
    # 15 x 13 at scales 0.5 and 1.75 make 7 x 22: ONNX Runtime maps back by the scales,
    # which PyTorch's interpolate does only when given them (a size maps by in / out).
    # (Scales whose sample positions land on whole numbers in both runtimes' float
    # arithmetic: ORT divides by the scale, PyTorch multiplies by its reciprocal.)
    attributes = {"mode": mode, "coordinate_transformation_mode": transform}
    if mode == "nearest":
        attributes["nearest_mode"] = "floor"
    scales = onnx.numpy_helper.from_array(np.array([1, 1, 0.5, 1.75], np.float32), "scales")
    graph = helper.make_graph(
        [helper.make_node("Resize", ["x", "", "scales"], ["y"], **attributes)], "resize",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 15, 13])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [scales])
    path = str(tmp_path / "resize.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    x = np.random.default_rng(0).standard_normal((1, 2, 15, 13)).astype(np.float32)
    (want,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with torch.no_grad():
        got = fuselage.from_onnx(path)(torch.from_numpy(x))
    assert tuple(got.shape) == want.shape == (1, 2, 7, 22)
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5)


def test_batch_normalization_reads_as_an_eval_batch_norm(tmp_path):
    # torch.onnx folds an eval batch norm into the conv; written by hand it stays.
    torch.manual_seed(0)
    c = 4
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"],
                              name="bn", epsilon=1e-3)]
    inits = [onnx.numpy_helper.from_array(a.astype(np.float32), n) for n, a in (
        ("w", np.random.randn(c, 3, 3, 3)), ("s", np.random.rand(c) + 0.5),
        ("b", np.random.randn(c)), ("m", np.random.randn(c) * 0.1),
        ("v", np.random.rand(c) + 0.5))]
    graph = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 3, 8, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, c, 8, 8])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    path = tmp_path / "bn.onnx"
    onnx.save(model, str(path))
    gm = assert_same_as_onnx_runtime(str(path), [torch.randn(1, 3, 8, 8)])
    assert any(isinstance(m, nn.BatchNorm2d) and not m.training for m in gm.modules())
    # A ModelProto reads as its file does.
    assert isinstance(fuselage.from_onnx(model), torch.fx.GraphModule)


@pytest.mark.parametrize("axis, with_bias", [(-1, True), (1, False), (-2, True)])
def test_layer_normalization_reads_as_onnx_runtime_runs_it(axis, with_bias, tmp_path):
    # LayerNormalization (opset 17), as torch.onnx writes convnext's and the transformers'
    # norms: an nn.LayerNorm over the dimensions from `axis` on; without B its bias is zero.
    rng = np.random.default_rng(0)
    shape = [2, 3, 4, 5]
    normalized = shape[axis:]
    inputs = ["x", "scale"] + (["bias"] if with_bias else [])
    inits = [onnx.numpy_helper.from_array((rng.random(normalized) + 0.5).astype(np.float32),
                                          "scale")]
    if with_bias:
        inits.append(onnx.numpy_helper.from_array(
            rng.standard_normal(normalized).astype(np.float32), "bias"))
    node = helper.make_node("LayerNormalization", inputs, ["y"], name="norm", axis=axis,
                            epsilon=1e-3)
    graph = helper.make_graph([node], "ln", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, shape)], inits)
    path = tmp_path / "ln.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    gm = assert_same_as_onnx_runtime(str(path), [torch.randn(*shape) * 3 + 1])
    (norm,) = [m for m in gm.modules() if isinstance(m, nn.LayerNorm)]
    assert list(norm.normalized_shape) == normalized and norm.eps == pytest.approx(1e-3)


def test_a_gelu_written_out_with_erf_reads_as_onnx_runtime_runs_it_and_writes_back(tmp_path):
    # torch.onnx (opset 17) writes GELU as x * 0.5 * (1 + Erf(x / sqrt 2)) (convnext's
    # blocks): Erf is torch.erf, and to_onnx writes it back as Erf.
    half, root2, one = (onnx.numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
                        (("half", 0.5), ("root2", 2 ** 0.5), ("one", 1.0)))
    nodes = [helper.make_node("Div", ["x", "root2"], ["d"], name="div"),
             helper.make_node("Erf", ["d"], ["e"], name="erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="add"),
             helper.make_node("Mul", ["x", "a"], ["m"], name="mul"),
             helper.make_node("Mul", ["m", "half"], ["y"], name="mul_half")]
    graph = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2, 8])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [2, 8])], [half, root2, one])
    path = tmp_path / "gelu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), str(path))
    x = torch.linspace(-4, 4, 16).reshape(2, 8)
    gm = assert_same_as_onnx_runtime(str(path), [x])
    assert [n.target for n in gm.graph.nodes].count(torch.erf) == 1
    with torch.no_grad():
        assert torch.allclose(gm(x), F.gelu(x), atol=1e-6)
    written = tmp_path / "written.onnx"
    fuselage.to_onnx(gm, str(written), (x,))
    assert "Erf" in op_types(str(written))
    np.testing.assert_allclose(ort_outputs(str(written), [x])[0], gm(x).detach().numpy(),
                               atol=1e-6)


def test_layer_normalization_whose_statistics_are_read_is_refused_naming_the_node():
    node = helper.make_node("LayerNormalization", ["x", "scale"], ["y", "mean"], name="norm")
    graph = helper.make_graph([node], "ln", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4]), helper.make_tensor_value_info(
            "mean", TensorProto.FLOAT, [1, 1])],
        [onnx.numpy_helper.from_array(np.ones(4, np.float32), "scale")])
    refused(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
            "node 'norm'", "Mean or InvStdDev output is read")


# ---- bad input ---------------------------------------------------------------------------

def small_model(op_type="Relu", domain="", opset=17, name="the_node", **attributes):
    node = helper.make_node(op_type, ["x"], ["y"], name=name, domain=domain, **attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 4])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1, 4])])
    imports = [helper.make_opsetid("", opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, 1))
    return helper.make_model(graph, opset_imports=imports, ir_version=8)


def refused(model, *expected):
    with pytest.raises(OnnxImportError) as e:
        fuselage.from_onnx(model)
    message = str(e.value)
    for text in expected:
        assert text in message, message
    return message


def test_a_malformed_or_truncated_file_is_refused(tmp_path, small_residual):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x08\x07\x12\xff\xff\xff this is not protobuf")
    refused(str(garbage), "garbage.onnx", "not an ONNX model")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    refused(str(empty), "empty.onnx", "not an ONNX model")
    good = export(small_residual, (torch.randn(1, 3, 16, 16),), tmp_path / "good.onnx")
    data = open(good, "rb").read()
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(data[:len(data) // 2])
    refused(str(truncated), "truncated")
    refused(str(tmp_path / "absent.onnx"), "absent.onnx")
    refused(42, "int", "ModelProto")


def test_an_unknown_op_or_domain_names_the_node():
    refused(small_model("Einsum"), "node 'the_node' (Einsum)", "'Einsum' is not one fuselage reads")
    refused(small_model("Frobnicate", domain="com.example"), "node 'the_node' (Frobnicate)",
            "domain 'com.example'")


def test_an_opset_it_does_not_read_is_refused():
    refused(small_model(opset=9), "opset is 9", "opset_version=17")


def test_an_attribute_it_cannot_express_names_the_node():
    refused(small_model("HardSigmoid", alpha=0.2), "node 'the_node' (HardSigmoid)", "alpha")
    refused(small_model("Softmax", axis=7), "the_node", "Softmax", "axis")


def test_an_attribute_out_of_range_or_a_type_mismatch_names_the_node(tmp_path):
    torch.manual_seed(0)
    path = export(Vision(), (torch.randn(1, 3, 32, 32),), tmp_path / "vision.onnx",
                  do_constant_folding=False)
    model = onnx.load(path)
    split = next(n for n in model.graph.node if n.op_type == "Split")
    next(a for a in split.attribute if a.name == "axis").i = 5   # rank 4
    refused(model, f"node '{split.name}' (Split)", "axis")
    model = onnx.load(path)
    cast = next(n for n in model.graph.node if n.op_type == "Cast")
    cast.attribute[0].i = TensorProto.UINT8   # a Clip bound no longer float
    refused(model, "(Clip)", "min (input 1) is integer; expected float")


def test_a_dynamic_input_shape_is_refused():
    model = small_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    refused(model, "graph input 'x'", "not static")


def test_a_hostile_shape_is_an_error_not_an_allocation():
    big = onnx.numpy_helper.from_array(np.array([1 << 20, 1 << 20], np.int64), "shape")
    node = helper.make_node("ConstantOfShape", ["shape"], ["c"], name="huge")
    add = helper.make_node("Add", ["x", "c"], ["y"], name="add")
    graph = helper.make_graph([node, add], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [1, 1])], [helper.make_tensor_value_info(
            "y", TensorProto.FLOAT, [1 << 20, 1 << 20])], [big])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=8)
    refused(model, "node 'huge' (ConstantOfShape)", "elements")
    wide = small_model()
    wide.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 1 << 40
    refused(wide, "graph input 'x'", "elements")


def test_missing_external_data_names_the_initializer(tmp_path, small_residual):
    path = export(small_residual, (torch.randn(1, 3, 16, 16),), tmp_path / "ext.onnx")
    model = onnx.load(path)
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.data", size_threshold=0)
    assert isinstance(fuselage.from_onnx(path), torch.fx.GraphModule)  # with its data: reads
    os.remove(tmp_path / "ext.data")
    refused(path, "initializer", "ext.data", "missing")
    refused(onnx.load(path, load_external_data=False), "initializer", "external")


def test_damaged_files_are_errors_never_crashes(tmp_path, small_residual):
    good = export(small_residual, (torch.randn(1, 3, 16, 16),), tmp_path / "good.onnx")
    data = bytearray(open(good, "rb").read())
    rng = np.random.default_rng(0)
    outcomes = collections.Counter()
    for i in range(40):
        damaged = bytearray(data)
        for at in rng.integers(0, len(damaged), size=4):
            damaged[at] = int(rng.integers(0, 256))
        path = tmp_path / f"damaged{i}.onnx"
        path.write_bytes(bytes(damaged))
        try:
            fuselage.from_onnx(str(path))
            outcomes["read"] += 1
        except OnnxImportError:
            outcomes["refused"] += 1
    assert outcomes["refused"] > 0, outcomes


# ---- quantize_static beside ONNX Runtime's own -------------------------------------------

@pytest.fixture(scope="module")
def residual_onnx(tmp_path_factory):
    torch.manual_seed(0)
    model = randomize_batch_norm(SmallResidual().eval())
    path = tmp_path_factory.mktemp("residual") / "residual.onnx"
    export(model, (torch.randn(1, 3, 32, 32),), path, input_names=["image"],
           output_names=["logits"])
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(8)]
    test = [torch.from_numpy(rng.standard_normal((1, 3, 32, 32)).astype(np.float32))
            for _ in range(4)]
    return str(path), calibration, test


def outputs_on(path, test, level=ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED):
    return np.concatenate([ort_outputs(path, [x], level=level)[0] for x in test])


def quantized_by_both(path, input_name, calibration, test, tmp_path, **settings):
    """(fuselage's file, its SQNR, ORT's SQNR): `path` quantized by fuselage.onnx.
    quantize_static and by ORT's with `settings`, each file's outputs on `test` against
    the float model's."""
    theirs, ours = tmp_path / "ort.onnx", tmp_path / "fuselage.onnx"
    quantization.quantize_static(path, str(theirs), Reader(input_name, calibration), **settings)
    fuselage.onnx.quantize_static(path, str(ours), Reader(input_name, calibration), **settings)
    reference = outputs_on(path, test, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return ours, sqnr(reference, outputs_on(ours, test)), sqnr(reference, outputs_on(theirs, test))


@pytest.mark.parametrize("activation_type", [QuantType.QUInt8, QuantType.QInt8])
def test_quantize_static_matches_onnx_runtimes_own(residual_onnx, activation_type, tmp_path):
    path, calibration, test = residual_onnx
    settings = dict(quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=activation_type, weight_type=QuantType.QInt8)
    theirs, ours = tmp_path / "ort.onnx", tmp_path / "fuselage.onnx"
    quantization.quantize_static(path, str(theirs), Reader("image", calibration), **settings)
    assert fuselage.onnx.quantize_static(path, str(ours), Reader("image", calibration),
                                         **settings) is None
    reference = outputs_on(path, test, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    theirs_sqnr = sqnr(reference, outputs_on(theirs, test))
    ours_sqnr = sqnr(reference, outputs_on(ours, test))
    assert ours_sqnr >= theirs_sqnr - 0.5, (ours_sqnr, theirs_sqnr)
    # The model's own input and output names; int8 QDQ of the asked type; ORT fuses it.
    model = onnx.load(str(ours))
    assert [i.name for i in model.graph.input] == ["image"]
    assert [o.name for o in model.graph.output] == ["logits"]
    expected = TensorProto.UINT8 if activation_type == QuantType.QUInt8 else TensorProto.INT8
    q_types = {model.graph.initializer[[t.name for t in model.graph.initializer]
                                       .index(n.input[2])].data_type
               for n in model.graph.node if n.op_type == "QuantizeLinear"}
    assert q_types == {expected}
    optimized = tmp_path / "optimized.onnx"
    ort_session(ours, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, optimized)
    fused = op_types(optimized)
    if activation_type == QuantType.QUInt8:
        assert fused["QLinearConv"] == 2 and fused["Conv"] == 0, fused
        assert fused["QLinearAdd"] == 1 and fused["QGemm"] == 1, fused
    else:  # ORT's x86 selectors fuse int8 only where a Q has one reader (onnx.md): as its own
        assert fused["QLinearConv"] == op_types(
            _optimized(theirs, tmp_path / "theirs.optimized.onnx"))["QLinearConv"]


def _input_scale(path):
    """The scale of the QuantizeLinear that reads the graph input."""
    graph = onnx.load(str(path)).graph
    values = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    q = next(n for n in graph.node if n.op_type == "QuantizeLinear" and
             n.input[0] == graph.input[0].name)
    return float(values[q.input[1]])


def test_symmetric_int8_activations_span_onnx_runtimes_range(residual_onnx, tmp_path):
    # ORT's symmetric int8 activations are over [-127, 127] (scale max|x| / 127); PyTorch's
    # symmetric observer over [-128, 127] gives max|x| / 127.5, which clips the largest
    # values by half a step (46.1 dB against ORT's 47.2 on onnx.md's conv-add Net).
    path, calibration, test = residual_onnx
    theirs, ours = tmp_path / "ort.onnx", tmp_path / "fuselage.onnx"
    settings = dict(per_channel=True, activation_type=QuantType.QInt8,
                    extra_options={"ActivationSymmetric": True})
    quantization.quantize_static(path, str(theirs), Reader("image", calibration), **settings)
    fuselage.onnx.quantize_static(path, str(ours), Reader("image", calibration), **settings)
    assert _input_scale(ours) == pytest.approx(_input_scale(theirs), rel=1e-6)
    reference = outputs_on(path, test, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    theirs_sqnr = sqnr(reference, outputs_on(theirs, test))
    ours_sqnr = sqnr(reference, outputs_on(ours, test))
    assert ours_sqnr >= theirs_sqnr - 0.5, (ours_sqnr, theirs_sqnr)


def _pool_qparams(path):
    """(scale of the DequantizeLinear the GlobalAveragePool reads, scale of the
    QuantizeLinear that reads its output) in a QDQ file."""
    from onnx import numpy_helper
    graph = onnx.load(str(path)).graph
    values = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    producer = {o: n for n in graph.node for o in n.output}
    pool = next(n for n in graph.node if n.op_type == "GlobalAveragePool")
    dq = producer[pool.input[0]]
    q = next(n for n in graph.node if n.op_type == "QuantizeLinear" and
             n.input[0] == pool.output[0])
    assert dq.op_type == "DequantizeLinear", dq.op_type
    return float(values[dq.input[1]]), float(values[q.input[1]])


def test_global_average_pool_output_has_its_own_scale_as_in_onnx_runtime(residual_onnx,
                                                                         tmp_path):
    # ORT calibrates GlobalAveragePool's output on its own (QLinearGlobalAveragePool
    # requantizes); PyTorch's native config shares the pool's input observer, and its
    # lowering keeps the input's parameters. fuselage writes DQ -> GlobalAveragePool -> Q
    # with the pool's own scale, ORT's.
    path, calibration, _ = residual_onnx
    theirs, ours = tmp_path / "ort.onnx", tmp_path / "fuselage.onnx"
    settings = dict(per_channel=True, activation_type=QuantType.QUInt8)
    quantization.quantize_static(path, str(theirs), Reader("image", calibration), **settings)
    fuselage.onnx.quantize_static(path, str(ours), Reader("image", calibration), **settings)
    their_in, their_out = _pool_qparams(theirs)
    our_in, our_out = _pool_qparams(ours)
    assert their_out < 0.9 * their_in, (their_in, their_out)  # a real requantization
    assert (our_in, our_out) == (pytest.approx(their_in, rel=1e-5),
                                 pytest.approx(their_out, rel=1e-5))
    fused = op_types(_optimized(ours, tmp_path / "ours.optimized.onnx"))
    assert fused["QLinearGlobalAveragePool"] == 1 and fused["GlobalAveragePool"] == 0, fused


class ClampIntoCat(nn.Module):
    """A relu6 output concatenated with a wider tensor: the cat shares one observer over
    both, which the relu6's bounds must not narrow."""

    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 4, 3, padding=1), nn.Conv2d(3, 4, 3, padding=1)
        self.conv3 = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.conv3(torch.cat([F.relu6(self.conv1(x)), self.conv2(x) * 8.0], 1))


def test_a_clamp_folds_into_its_op_only_where_exact(tmp_path):
    torch.manual_seed(0)
    path = export(ClampIntoCat(), (torch.randn(1, 3, 16, 16),), tmp_path / "cat.onnx")
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    test = [torch.from_numpy(c) for c in calibration]
    name = onnx.load(path).graph.input[0].name
    theirs, ours = tmp_path / "ort.onnx", tmp_path / "fuselage.onnx"
    quantization.quantize_static(path, str(theirs), Reader(name, calibration),
                                 activation_type=QuantType.QUInt8)
    fuselage.onnx.quantize_static(path, str(ours), Reader(name, calibration),
                                  activation_type=QuantType.QUInt8)
    reference = outputs_on(path, test, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    theirs_sqnr = sqnr(reference, outputs_on(theirs, test))
    ours_sqnr = sqnr(reference, outputs_on(ours, test))
    assert ours_sqnr >= theirs_sqnr - 0.5 and ours_sqnr > 20, (ours_sqnr, theirs_sqnr)


def _optimized(path, optimized):
    ort_session(path, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED, optimized)
    return optimized


def test_op_types_and_nodes_to_exclude_keep_ops_float(residual_onnx, tmp_path):
    path, calibration, _ = residual_onnx
    out = tmp_path / "convs.onnx"
    fuselage.onnx.quantize_static(path, str(out), Reader("image", calibration),
                                  op_types_to_quantize=["Conv"], per_channel=True,
                                  activation_type=QuantType.QUInt8)
    fused = op_types(_optimized(out, tmp_path / "convs.optimized.onnx"))
    assert fused["QLinearConv"] == 2 and fused["QGemm"] == 0 and fused["Gemm"] == 1, fused
    gemm = next(n.name for n in onnx.load(path).graph.node if n.op_type == "Gemm")
    out = tmp_path / "no_gemm.onnx"
    fuselage.onnx.quantize_static(path, str(out), Reader("image", calibration),
                                  nodes_to_exclude=[gemm], activation_type=QuantType.QUInt8)
    fused = op_types(_optimized(out, tmp_path / "no_gemm.optimized.onnx"))
    assert fused["QLinearConv"] == 2 and fused["QGemm"] == 0 and fused["Gemm"] == 1, fused


@pytest.mark.parametrize("chosen, fused_ops", [
    (["Gemm"], {"QGemm": 1, "QLinearConv": 0, "QLinearAdd": 0}),
    (["Add"], {"QGemm": 0, "QLinearConv": 0, "QLinearAdd": 1}),
])
def test_op_types_without_conv_keep_a_conv_relu_float(residual_onnx, chosen, fused_ops,
                                                      tmp_path):
    # nn.ReLU was quantized by object type with a Gemm or an Add, so the conv-relu, whose
    # conv was not, was refused ("the parts of a fused module need the same object-type
    # qconfig"); ORT quantizes the Gemm or the Add alone.
    path, calibration, test = residual_onnx
    ours, ours_sqnr, theirs_sqnr = quantized_by_both(
        path, "image", calibration, test, tmp_path, op_types_to_quantize=chosen,
        per_channel=True, activation_type=QuantType.QUInt8)
    assert ours_sqnr >= theirs_sqnr - 0.5, (ours_sqnr, theirs_sqnr)
    fused = op_types(_optimized(ours, tmp_path / "optimized.onnx"))
    assert {op: fused[op] for op in fused_ops} == fused_ops, fused


def test_op_types_to_quantize_empty_quantizes_every_op_as_onnx_runtimes_does(residual_onnx,
                                                                             tmp_path):
    # ORT takes [] as None (every op type it quantizes); fuselage quantized nothing.
    path, calibration, test = residual_onnx
    ours, ours_sqnr, theirs_sqnr = quantized_by_both(
        path, "image", calibration, test, tmp_path, op_types_to_quantize=[],
        per_channel=True, activation_type=QuantType.QUInt8)
    assert abs(ours_sqnr - theirs_sqnr) <= 0.5, (ours_sqnr, theirs_sqnr)
    assert op_types(ours)["QuantizeLinear"] > 0


@pytest.mark.parametrize("argument, value", [
    ("quant_format", QuantFormat.QOperator),
    ("calibrate_method", CalibrationMethod.Entropy),
    ("calibrate_method", CalibrationMethod.Percentile),
    ("activation_type", QuantType.QUInt16),
    ("weight_type", QuantType.QUInt8),
    ("nodes_to_quantize", ["conv"]),
    ("op_types_to_quantize", ["LSTM"]),
    ("nodes_to_exclude", ["no such node"]),
    ("extra_options", {"CalibMovingAverage": True}),
])
def test_an_unsupported_option_names_the_argument_and_writes_nothing(
        residual_onnx, tmp_path, argument, value):
    path, calibration, _ = residual_onnx
    out = tmp_path / "out.onnx"
    out.write_bytes(b"the old file")
    with pytest.raises(OnnxImportError) as e:
        fuselage.onnx.quantize_static(path, str(out), Reader("image", calibration),
                                      **{argument: value})
    assert argument in str(e.value)
    assert out.read_bytes() == b"the old file"
    assert os.listdir(tmp_path) == ["out.onnx"]  # no temporary file left


def test_quantize_static_of_pads_resizes_and_slices(tmp_path):
    # ORT's own quantize_static breaks this graph's Split (without quant_pre_process); the
    # expectation is ORT's float outputs.
    torch.manual_seed(0)
    path = export(Vision(), (torch.randn(1, 3, 32, 32),), tmp_path / "vision.onnx",
                  input_names=["image"])
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(8)]
    test = [torch.from_numpy(c) for c in calibration[:4]]
    out = tmp_path / "vision.qdq.onnx"
    fuselage.onnx.quantize_static(path, str(out), Reader("image", calibration),
                                  per_channel=True, activation_type=QuantType.QUInt8)
    assert {"Pad", "Resize", "Slice", "Split"} <= set(op_types(out))
    assert [o.name for o in onnx.load(str(out)).graph.output] == \
        [o.name for o in onnx.load(path).graph.output]  # both outputs keep their names
    session = ort_session(out, ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED)
    reference = [ort_outputs(path, [x]) for x in test]
    ours = [session.run(None, {"image": x.numpy()}) for x in test]
    for i in range(2):  # both outputs
        assert sqnr(np.concatenate([r[i] for r in reference]),
                    np.concatenate([o[i] for o in ours])) > 30


def test_a_model_proto_in_a_path_out_and_enum_names(residual_onnx, tmp_path):
    path, calibration, test = residual_onnx
    out = tmp_path / "named.onnx"   # a pathlib.Path, as ORT takes
    fuselage.onnx.quantize_static(onnx.load(path), out, Reader("image", calibration),
                                  quant_format="QDQ", activation_type="QUInt8",
                                  weight_type="QInt8", calibrate_method="MinMax")
    reference = outputs_on(path, test, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    assert sqnr(reference, outputs_on(out, test)) > 20


@pytest.mark.parametrize("change", [lambda x: np.concatenate([x, x]),    # batch 2
                                    lambda x: x[:, :, :16],                  # 16 x 32
                                    lambda x: x.astype(np.float64)])
def test_a_calibration_sample_of_another_shape_or_type_names_the_input(
        residual_onnx, change, tmp_path):
    # The written file's shapes were the first sample's: calibrated on batch 2, it took
    # only batch 2, where the model (and ONNX Runtime, which refuses such samples) takes 1.
    path, calibration, _ = residual_onnx
    samples = [calibration[0], change(calibration[1])]
    with pytest.raises(Exception):
        quantization.quantize_static(path, str(tmp_path / "ort.onnx"),
                                     Reader("image", samples))
    out = tmp_path / "out.onnx"
    with pytest.raises(OnnxImportError, match="calibration sample 1, input 'image'.*"
                       r"float32 of shape \[1, 3, 32, 32\]"):
        fuselage.onnx.quantize_static(path, str(out), Reader("image", samples))
    assert not out.exists()


@pytest.mark.parametrize("outputs", [["c", "a", "c"], ["a", "c", "a"]])
def test_an_output_that_is_an_input_or_listed_twice_keeps_its_name_once(outputs, tmp_path):
    # ONNX names a value once; the writer gives each output its own copy (an Identity of
    # the input, a second DequantizeLinear), which the source names could not all name.
    rng = np.random.default_rng(0)
    weight = onnx.numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(
        np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["a", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], [weight])
    path = str(tmp_path / "alias.onnx")
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                ir_version=8), path)
    calibration = [rng.standard_normal((1, 3, 6, 6)).astype(np.float32) for _ in range(4)]
    out = tmp_path / "alias.qdq.onnx"
    fuselage.onnx.quantize_static(path, str(out), Reader("a", calibration))
    assert [o.name for o in onnx.load(str(out)).graph.output] == outputs
    x = torch.from_numpy(calibration[0])
    reference, ours = ort_outputs(path, [x]), ort_outputs(out, [x])
    for name, want, got in zip(outputs, reference, ours):
        if name == "a":
            np.testing.assert_array_equal(got, want)   # the input itself, float
        else:
            assert sqnr(want, got) > 30, (name, sqnr(want, got))


def test_a_reader_without_the_input_names_it(residual_onnx, tmp_path):
    path, calibration, _ = residual_onnx
    with pytest.raises(OnnxImportError, match="no value for input 'image'"):
        fuselage.onnx.quantize_static(path, str(tmp_path / "out.onnx"),
                                      Reader("input", calibration))
    assert not (tmp_path / "out.onnx").exists()


# ---- the command line --------------------------------------------------------------------

def cli(*args):
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "python"), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "fuselage", *args], capture_output=True,
                          text=True, env=env, timeout=300)


def test_the_command_line_quantizes_and_refuses_bad_input(residual_onnx, tmp_path):
    path, _, test = residual_onnx
    out = tmp_path / "cli.onnx"
    done = cli("quantize-onnx", path, "-o", str(out), "--calibration", "4")
    assert done.returncode == 0, done.stderr
    fused = op_types(_optimized(out, tmp_path / "cli.optimized.onnx"))
    assert fused["QLinearConv"] == 2, fused
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    done = cli("quantize-onnx", str(bad), "-o", str(tmp_path / "never.onnx"))
    assert done.returncode == 1
    assert "bad.onnx" in done.stderr and "not an ONNX model" in done.stderr
    assert not (tmp_path / "never.onnx").exists()


class _ConvNextBlock(nn.Module):
    """convnext's block in small: a depthwise conv, a layer norm over the channels (a
    permute around nn.LayerNorm, as torchvision writes it), a GELU between linears."""

    def __init__(self, c=8):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 3, padding=1)
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.up, self.down = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.head = nn.Linear(c, 5)

    def forward(self, x):
        x = self.stem(x)
        y = self.norm(self.dw(x).permute(0, 2, 3, 1))
        y = self.down(F.gelu(self.up(y))).permute(0, 3, 1, 2)
        return self.head((x + y).mean((2, 3)))


def test_quantize_static_of_layer_norms_and_erf_gelus_is_as_good_as_onnx_runtimes(tmp_path):
    # LayerNormalization and the Erf of a written-out GELU read (convnext_tiny: 28.64 dB,
    # as ONNX Runtime's own), and the quantized layer norm is written back as DQ ->
    # LayerNormalization -> Q, as ORT's QDQ quantizer writes it.
    torch.manual_seed(0)
    path = export(_ConvNextBlock().eval(), (torch.randn(1, 3, 16, 16),), tmp_path / "block.onnx",
                  input_names=["image"])
    assert {"LayerNormalization", "Erf"} <= set(op_types(path))
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((1, 3, 16, 16)).astype(np.float32) for _ in range(8)]
    test = [torch.from_numpy(rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
            for _ in range(4)]
    settings = dict(quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    theirs, ours = tmp_path / "ort.onnx", tmp_path / "fuselage.onnx"
    quantization.quantize_static(str(path), str(theirs), Reader("image", calibration), **settings)
    fuselage.onnx.quantize_static(str(path), str(ours), Reader("image", calibration), **settings)
    reference = outputs_on(path, test, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    ours_sqnr, theirs_sqnr = sqnr(reference, outputs_on(ours, test)), \
        sqnr(reference, outputs_on(theirs, test))
    assert ours_sqnr >= theirs_sqnr - 0.5, (ours_sqnr, theirs_sqnr)
    model = onnx.load(str(ours))
    (norm,) = [n for n in model.graph.node if n.op_type == "LayerNormalization"]
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    readers = [n.op_type for n in model.graph.node if norm.output[0] in n.input]
    assert producers[norm.input[0]] == "DequantizeLinear" and readers == ["QuantizeLinear"]


@pytest.mark.parametrize("pool", [nn.MaxPool1d(3, 2, padding=1), nn.AvgPool1d(3, 2),
                                  nn.AvgPool1d(2, ceil_mode=True, count_include_pad=False)],
                         ids=["max", "avg", "avg_ceil"])
def test_quantize_static_of_1d_pools_is_as_good_as_onnx_runtimes(pool, tmp_path):
    # An audio-style Conv1d -> Relu -> pool -> Conv1d: the quantized 1-d pools run on
    # fuselage's runtime (the 2-d kernels over [N, C, 1, L], as ATen's), so the file is
    # written; ONNX Runtime runs it as well as its own quantization.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv1d(2, 8, 3, padding=1), nn.ReLU(), pool,
                          nn.Conv1d(8, 4, 1)).eval()
    path = export(model, (torch.randn(1, 2, 32),), tmp_path / "audio.onnx", input_names=["x"])
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((1, 2, 32)).astype(np.float32) for _ in range(8)]
    test = [torch.from_numpy(c) for c in calibration[:4]]
    _, ours_sqnr, theirs_sqnr = quantized_by_both(path, "x", calibration, test, tmp_path)
    assert ours_sqnr >= theirs_sqnr - 0.5, (ours_sqnr, theirs_sqnr)


@pytest.mark.parametrize("engine, refused", [
    ("x86", r"node '\w*MaxPool\w*'.*nn.MaxPool3d"),
    ("qnnpack", r"module '\w*Conv\w*' \(nnq.Conv3d\): PyTorch's quantized engine 'qnnpack' "
                r"cannot unpack its packed weight")])
def test_a_model_the_runtime_cannot_run_quantized_is_refused_naming_the_step_and_node(
        engine, refused, monkeypatch, tmp_path):
    # fuselage's runtime has no quantized 3-d pool, and PyTorch's QNNPACK engine cannot
    # unpack a conv3d weight it packed (a raw RuntimeError before): the error says it is
    # quantize_static's writing step, at which node or module; no file is written.
    monkeypatch.setattr(torch.backends.quantized, "engine", engine)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv3d(2, 4, 3, padding=1), nn.MaxPool3d(2)).eval()
    path = export(model, (torch.randn(1, 2, 6, 6, 6),), tmp_path / "volume.onnx",
                  input_names=["x"])
    rng = np.random.default_rng(0)
    calibration = [rng.standard_normal((1, 2, 6, 6, 6)).astype(np.float32) for _ in range(2)]
    out = tmp_path / "volume.qdq.onnx"
    with pytest.raises(fuselage.OnnxExportError,
                       match=r"quantize_static: writing the quantized model: .*" + refused):
        fuselage.onnx.quantize_static(path, str(out), Reader("x", calibration))
    assert not out.exists()
