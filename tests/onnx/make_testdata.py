"""Writes tests/onnx/testdata: small float ONNX models built with onnx.helper, the model
file each reads as (`<name>.python.textproto`) and ONNX Runtime's output on a fixed input.
The C++ ONNX reader's tests (tests/onnx/onnx_reader_test.cc) compare against these.

The checked-in model files were written by fuselage's former Python importer (an
independent implementation, removed when the C++ reader became the only one): they pin
the reader's graphs, names and bytes. This script writes a model file only where none
exists (a new model's: fuselage.from_onnx's, after checking it runs to ONNX Runtime's
outputs; read it before checking it in).

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


def _checked_model(graph, opset=17, ir_version=8):
    """`graph` as a model of `opset` and `ir_version`, checked by onnx.checker."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="make_testdata.py")
    model.ir_version = ir_version
    onnx.checker.check_model(model)
    return model


def _in_topological_order(nodes, given):
    """`nodes` in an order where each comes after the producers of its inputs (the names
    in `given` are graph inputs); among the ready ones, the first listed goes first."""
    order, made, pending = [], set(given), list(nodes)
    while pending:
        ready = next(n for n in pending if all(not i or i in made for i in n.input))
        order.append(ready)
        made.update(ready.output)
        pending.remove(ready)
    return order


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
    return _checked_model(graph)


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
    return _checked_model(graph, opset=13, ir_version=7)


def names_model():
    """ONNX names fuselage's reader and torch.fx rename: a graph input named like a
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
    return _checked_model(graph)


def _constant(name, array, dtype):
    """A Constant node named after its output `name`, holding `array` as `dtype`."""
    return helper.make_node("Constant", [], [name], f"/{name}/Constant",
                            value=numpy_helper.from_array(np.asarray(array, dtype), name))


def _i64(name, array):
    return _constant(name, array, np.int64)


def _f32(name, array):
    return _constant(name, array, np.float32)


def fold_ops_model():
    """Shape arithmetic the reader folds to constants (every op it reads only on constants,
    and the tensor ops on constants), in one graph of input [1, 4] at opset 17: the folded
    [1, 4] constant is added to the input, so ONNX Runtime's output checks every fold."""
    node = helper.make_node
    nodes = [
        node("Shape", ["x"], ["s"], "/Shape"),
        node("ReduceProd", ["s"], ["n"], "/ReduceProd_1", keepdims=0),
        _i64("zero", 0), _i64("one", 1), _i64("two", 2),
        node("Gather", ["s", "one"], ["width"], "/Gather", axis=0),
        node("Range", ["zero", "width", "one"], ["r"], "/Range"),
        node("Cast", ["r"], ["rf"], "/Cast", to=TensorProto.FLOAT),
        node("Sqrt", ["rf"], ["sq"], "/Sqrt"),
        node("Floor", ["sq"], ["fl"], "/Floor"),
        node("Ceil", ["sq"], ["ce"], "/Ceil"),
        node("Neg", ["ce"], ["ng"], "/Neg"),
        node("Abs", ["ng"], ["ab"], "/Abs"),
        _f32("two_f", 2.0),
        node("Pow", ["ab", "two_f"], ["pw"], "/Pow"),
        node("Equal", ["r", "two"], ["eq"], "/Equal"),
        node("Where", ["eq", "pw", "fl"], ["wh"], "/Where"),
        node("Less", ["r", "one"], ["ls"], "/Less"),
        node("Greater", ["r", "two"], ["gt"], "/Greater"),
        node("Not", ["gt"], ["nt"], "/Not"),
        node("Cast", ["ls"], ["lsf"], "/Cast_1", to=TensorProto.FLOAT),
        node("Cast", ["nt"], ["ntf"], "/Cast_2", to=TensorProto.FLOAT),
        node("Max", ["wh", "lsf"], ["mx"], "/Max"),
        _f32("three_f", 3.0),
        node("Min", ["mx", "three_f", "ntf"], ["mn"], "/Min"),
        _i64("one_1d", [1]),
        node("Unsqueeze", ["n", "zero_1d"], ["n_1d"], "/Unsqueeze"),
        _i64("zero_1d", [0]),
        node("Concat", ["one_1d", "n_1d"], ["cos_shape"], "/Concat", axis=0),
        node("ConstantOfShape", ["cos_shape"], ["cos"], "/ConstantOfShape",
             value=numpy_helper.from_array(np.asarray([0.5], np.float32))),
        _f32("two_11", [[2.0]]),
        node("Expand", ["two_11", "s"], ["ex"], "/Expand"),
        _f32("pm", [[1.0, -1.0]]),
        _i64("reps", [1, 2]),
        node("Tile", ["pm", "reps"], ["tl"], "/Tile"),
        node("ReduceProd", ["ex"], ["rp"], "/ReduceProd", axes=[0], keepdims=1),
        node("ReduceSum", ["tl", "one_1d"], ["rsum"], "/ReduceSum", keepdims=1),
        _i64("seven", 7),
        node("Div", ["seven", "two"], ["dv"], "/Div"),
        node("Sub", ["dv", "one"], ["sb"], "/Sub"),
        node("Size", ["sl"], ["sl_size"], "/Size"),
        node("Sub", ["sl_size", "two"], ["sl_zero"], "/Sub_1"),
        node("Add", ["sb", "sl_zero"], ["sb2"], "/Add"),
        node("Slice", ["r", "one_1d", "three_1d"], ["sl"], "/Slice"),
        _i64("three_1d", [3]),
        node("Unsqueeze", ["sb2", "zero_1d"], ["sb_1d"], "/Unsqueeze_1"),
        _i64("five", [[5]]),
        node("Squeeze", ["five", "zero_1d"], ["five_1d"], "/Squeeze"),
        node("Concat", ["sl", "sb_1d", "five_1d"], ["ints"], "/Concat_1", axis=0),
        node("Cast", ["ints"], ["qf"], "/Cast_3", to=TensorProto.FLOAT),
        _f32("m22", [[1.0, 2.0], [3.0, 4.0]]),
        node("Transpose", ["m22"], ["tr"], "/Transpose", perm=[1, 0]),
        _f32("ones_12", [[1.0, 1.0]]),
        node("MatMul", ["ones_12", "tr"], ["mm"], "/MatMul"),
        _i64("shape_2", [2]),
        node("Reshape", ["mm", "shape_2"], ["mmr"], "/Reshape"),
        _i64("reps_2", [2]),
        node("Tile", ["mmr", "reps_2"], ["mmt"], "/Tile_1"),
        node("Mul", ["mn", "cos"], ["a"], "/Mul"),
        node("Add", ["a", "rp"], ["b"], "/Add_1"),
        node("Add", ["b", "tl"], ["c"], "/Add_2"),
        node("Add", ["c", "rsum"], ["c2"], "/Add_3"),
        node("Add", ["c2", "qf"], ["e"], "/Add_4"),
        node("Div", ["e", "mmt"], ["f"], "/Div_1"),
        node("Identity", ["f"], ["g"], "/Identity"),
        node("Add", ["x", "g"], ["out"], "/Add_5"),
    ]
    # The graph above lists some constants after their first reader.
    order = _in_topological_order(nodes, {"x"})
    graph = helper.make_graph(
        order, "fold_ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 4])])
    return _checked_model(graph)


def shape_ops_model():
    """The tensor ops of static shapes, in one graph of input [1, 2, 6, 6] at opset 17:
    Resize to sizes computed from Shape (nearest, asymmetric, floor) and by scales (linear,
    half_pixel), Pad with a value, Slice of two axes (one whole), Split by sizes and into
    equal parts, Unsqueeze and Squeeze of a tensor, Reshape to a computed shape."""
    node = helper.make_node
    nodes = [
        node("Shape", ["x"], ["s"], "/Shape"),
        node("Shape", ["x"], ["nc"], "/Shape_1", start=0, end=2),
        _i64("two", 2), _i64("zero_1d", [0]),
        node("Gather", ["s", "two"], ["h"], "/Gather", axis=0),
        node("Mul", ["h", "two"], ["h2"], "/Mul"),
        node("Unsqueeze", ["h2", "zero_1d"], ["h2_1d"], "/Unsqueeze"),
        node("Concat", ["nc", "h2_1d", "h2_1d"], ["sizes"], "/Concat", axis=0),
        node("Resize", ["x", "", "", "sizes"], ["up"], "/Resize", mode="nearest",
             coordinate_transformation_mode="asymmetric", nearest_mode="floor"),
        _i64("pads", [0, 0, 1, 2, 0, 0, 2, 1]), _f32("half", 0.5),
        node("Pad", ["up", "pads", "half"], ["padded"], "/Pad", mode="constant"),
        _i64("starts", [1, 0]), _i64("ends", [-1, 2**63 - 1]), _i64("axes", [2, 3]),
        node("Slice", ["padded", "starts", "ends", "axes"], ["sliced"], "/Slice"),
        _i64("split", [5, 8]),
        node("Split", ["sliced", "split"], ["a", "b"], "/Split", axis=2),
        _f32("scales", [1.0, 1.0, 2.0, 2.0]),
        _f32("roi", []),
        node("Resize", ["a", "roi", "scales"], ["lin"], "/Resize_1", mode="linear",
             coordinate_transformation_mode="half_pixel"),
        node("Unsqueeze", ["b", "zero_1d"], ["b5"], "/Unsqueeze_1"),
        node("Squeeze", ["b5", "zero_1d"], ["b4"], "/Squeeze"),
        node("Split", ["b4"], ["b_top", "b_bottom"], "/Split_1", axis=2),
        node("Add", ["b_top", "b_bottom"], ["bsum"], "/Add"),
        node("Shape", ["lin"], ["lin_shape"], "/Shape_2"),
        node("Slice", ["lin_shape", "zero_1d", "two_1d"], ["lin_nc"], "/Slice_1"),
        _i64("two_1d", [2]), _i64("minus_one", [-1]),
        node("Concat", ["lin_nc", "minus_one"], ["lin_target"], "/Concat_1", axis=0),
        node("Reshape", ["lin", "lin_target"], ["lin_flat"], "/Reshape"),
        _i64("flat", [1, 2, -1]),
        node("Reshape", ["bsum", "flat"], ["bsum_flat"], "/Reshape_1"),
        node("Concat", ["lin_flat", "bsum_flat"], ["out"], "/Concat_2", axis=2),
    ]
    order = _in_topological_order(nodes, {"x"})
    graph = helper.make_graph(
        order, "shape_ops", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 6, 6])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 2, 10 * 30 + 4 * 15])])
    return _checked_model(graph)


def write_floats(path, array):
    np.asarray(array, dtype="<f4").tofile(path)


def main():
    import fuselage
    import onnxruntime as ort
    import torch
    os.makedirs(OUT, exist_ok=True)
    for name, model, shape in (("all_ops", all_ops_model(), (1, 3, 8, 8)),
                               ("more_ops", more_ops_model(), (1, 2, 5, 5)),
                               ("names", names_model(), (1, 4)),
                               ("fold_ops", fold_ops_model(), (1, 4)),
                               ("shape_ops", shape_ops_model(), (1, 2, 6, 6))):
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
        golden = os.path.join(OUT, f"{name}.python.textproto")
        if not os.path.exists(golden):
            fuselage.export(gm, (torch.from_numpy(x),), golden)


if __name__ == "__main__":
    main()
