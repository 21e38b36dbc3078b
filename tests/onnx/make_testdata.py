"""Writes tests/onnx/testdata: small float ONNX models built with onnx.helper, the model
file fuselage's Python importer (fuselage.from_onnx, then fuselage.export) makes of each,
and ONNX Runtime's output on a fixed input. The C++ ONNX reader's tests
(tests/onnx/onnx_reader_test.cc) compare against these.

Run it with the PyTorch 2 environment's Python (onnx, onnxruntime, torch):
  ~/.cache/fuselage/pytorch2/bin/python tests/onnx/make_testdata.py
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "testdata")
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))


def init(name, array):
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def all_ops_model():
    """Every op the C++ reader must read, in one graph of input [1, 3, 8, 8]."""
    rng = np.random.default_rng(37)
    r = lambda *shape: rng.standard_normal(shape).astype(np.float32) * 0.5  # noqa: E731
    inits = [
        init("w1", r(4, 3, 3, 3)), init("b1", r(4)),
        init("bn_scale", 1 + r(4) * 0.1), init("bn_bias", r(4)), init("bn_mean", r(4)),
        init("bn_var", 1 + np.abs(r(4))),
        init("clip_min", 0.0), init("clip_max", 6.0), init("half", 0.5),
        init("wg", r(6, 8)), init("bg", r(6)), init("wm", r(3, 4)),
        numpy_helper.from_array(np.asarray([2, 3], np.int64), "shape"),
    ]
    # float_data instead of raw_data for one initializer: the reader takes both.
    inits[1] = helper.make_tensor("b1", TensorProto.FLOAT, [4], r(4).tolist())
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["conv"], "/conv/Conv",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["conv", "bn_scale", "bn_bias", "bn_mean",
                                                "bn_var"], ["bn"], "/bn/BatchNormalization",
                         epsilon=1e-5),
        helper.make_node("Relu", ["bn"], ["relu"], "/Relu"),
        helper.make_node("Clip", ["relu", "clip_min", "clip_max"], ["clip"], "/Clip"),
        helper.make_node("Sigmoid", ["clip"], ["sig"], "/Sigmoid"),
        helper.make_node("HardSigmoid", ["relu"], ["hsig"], "/HardSigmoid",
                         alpha=1.0 / 6, beta=0.5),
        helper.make_node("HardSwish", ["sig"], ["hsw"], "/HardSwish"),
        helper.make_node("Add", ["hsw", "hsig"], ["add"], "/Add"),
        helper.make_node("Mul", ["add", "half"], ["mul"], "/Mul"),
        helper.make_node("Concat", ["mul", "clip"], ["cat"], "/Concat", axis=1),
        helper.make_node("MaxPool", ["cat"], ["mp"], "/pool/MaxPool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("AveragePool", ["mp"], ["ap"], "/AveragePool", kernel_shape=[3, 3],
                         strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=0),
        helper.make_node("ReduceMean", ["ap"], ["rm"], "/ReduceMean", axes=[2, 3],
                         keepdims=1),
        helper.make_node("GlobalAveragePool", ["ap"], ["gap"], "/GlobalAveragePool"),
        helper.make_node("Add", ["rm", "gap"], ["add2"], "/Add_1"),
        helper.make_node("Flatten", ["add2"], ["flat"], "/Flatten", axis=1),
        helper.make_node("Gemm", ["flat", "wg", "bg"], ["gemm"], "/fc/Gemm", transB=1),
        helper.make_node("Reshape", ["gemm", "shape"], ["rs"], "/Reshape"),
        helper.make_node("MatMul", ["rs", "wm"], ["out"], "/MatMul"),
    ]
    graph = helper.make_graph(
        nodes, "all_ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="make_testdata.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def more_ops_model():
    """The reader's other mappings, in one graph of input [1, 2, 5, 5] at opset 13: an
    asymmetrically padded conv (F.pad first), Clip as ReLU / Hardtanh / clamp, Gemm without
    transB with alpha and beta, Flatten at axis 2, Reshape with 0 and -1, Transpose, Softmax,
    MatMul of two tensors, Sub, Div, Tanh, Identity and Constant nodes."""
    rng = np.random.default_rng(13)
    r = lambda *shape: rng.standard_normal(shape).astype(np.float32) * 0.5  # noqa: E731
    inits = [init("w", r(3, 2, 2, 2)), init("zero", 0.0), init("lo", -0.5), init("hi", 0.75),
             init("gw", r(5, 3)), init("gb", r(3)), init("bias", r(3, 1, 1))]
    const = lambda name, array: helper.make_node(  # noqa: E731
        "Constant", [], [name], f"/{name}/Constant",
        value=numpy_helper.from_array(np.asarray(array), name))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["conv"], "/conv/Conv", kernel_shape=[2, 2],
                         pads=[0, 1, 1, 0], strides=[1, 1]),
        helper.make_node("Clip", ["conv", "zero"], ["relu"], "/Clip"),
        helper.make_node("Clip", ["relu", "lo", "hi"], ["ht"], "/Clip_1"),
        helper.make_node("Clip", ["ht", "", "hi"], ["cl"], "/Clip_2"),
        helper.make_node("Sub", ["cl", "bias"], ["sub"], "/Sub"),
        helper.make_node("Tanh", ["sub"], ["tanh"], "/Tanh"),
        const("two", np.float32(2.0)),
        helper.make_node("Div", ["tanh", "two"], ["div"], "/Div"),
        helper.make_node("Identity", ["div"], ["ident"], "/Identity"),
        helper.make_node("Flatten", ["ident"], ["flat"], "/Flatten", axis=2),
        const("shape", np.asarray([0, -1, 5], np.int64)),
        helper.make_node("Reshape", ["flat", "shape"], ["rs"], "/Reshape"),
        const("shape2d", np.asarray([-1, 5], np.int64)),
        helper.make_node("Reshape", ["rs", "shape2d"], ["rs_2d"], "/Reshape_1"),
        helper.make_node("Gemm", ["rs_2d", "gw", "gb"], ["gemm"], "/fc/Gemm", alpha=0.5,
                         beta=2.0),
        helper.make_node("Transpose", ["gemm"], ["tr"], "/Transpose", perm=[1, 0]),
        helper.make_node("Softmax", ["tr"], ["sm"], "/Softmax", axis=0),
        helper.make_node("MatMul", ["sm", "gemm"], ["out"], "/MatMul"),
    ]
    graph = helper.make_graph(
        nodes, "more_ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [3, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="make_testdata.py")
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def names_model():
    """ONNX names fuselage's Python importer and torch.fx rename: a graph input named like a
    Python builtin, nodes named like builtins, like the output node, alike, with characters
    no identifier has, with a numeric suffix, and with no name."""
    names = ["min", "input", "output", "", "1/weird name.x", "Relu_3", "Relu.3", "x_01", "x"]
    nodes = []
    value = "input"
    for i, name in enumerate(names):
        nodes.append(helper.make_node("Relu", [value], [f"v{i}"], name))
        value = f"v{i}"
    graph = helper.make_graph(
        nodes, "names", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info(value, TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="make_testdata.py")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def write_floats(path, array):
    np.asarray(array, dtype="<f4").tofile(path)


def main():
    import fuselage
    import onnxruntime as ort
    import torch
    os.makedirs(OUT, exist_ok=True)
    for name, model, shape in (("all_ops", all_ops_model(), (1, 3, 8, 8)),
                               ("more_ops", more_ops_model(), (1, 2, 5, 5)),
                               ("names", names_model(), (1, 4))):
        path = os.path.join(OUT, f"{name}.onnx")
        onnx.save(model, path)
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        (expected,) = session.run(None, {session.get_inputs()[0].name: x})
        write_floats(os.path.join(OUT, f"{name}.input.f32"), x)
        write_floats(os.path.join(OUT, f"{name}.ort_output.f32"), expected)
        gm = fuselage.from_onnx(path)
        with torch.no_grad():
            assert np.allclose(gm(torch.from_numpy(x)).numpy(), expected, atol=1e-5)
        fuselage.export(gm, (torch.from_numpy(x),), os.path.join(OUT, f"{name}.python.textproto"))


if __name__ == "__main__":
    main()
