"""fuselage.from_onnx: a float ONNX model as a torch.fx.GraphModule fuselage quantizes.

The pattern is fuselage.from_exported's: a foreign graph rewritten into the FX form
fuselage's engine already fuses and quantizes (DESIGN.md, "Front ends"). Each ONNX node
becomes the PyTorch module or function torchvision's own models use for it:

  Conv                 nn.Conv1d / nn.Conv2d (the initializers as its parameters)
  BatchNormalization   nn.BatchNorm1d / 2d in eval mode (its running statistics)
  Gemm, MatMul by a    nn.Linear
    constant matrix
  Relu, Clip           nn.ReLU, nn.ReLU6 (Clip 0..6), nn.Hardtanh, torch.clamp
  MaxPool, AveragePool nn.MaxPool2d, nn.AvgPool2d; GlobalAveragePool nn.AdaptiveAvgPool2d(1)
  Add, Mul, Sub, Div   operator.add, ... (a one-element constant as a Python number)
  ...                  the table _OPS below

Shapes are static: the graph is run on zeros of the graph inputs' shapes as it is built,
so every tensor's shape is known (and checked against ONNX shape inference's, whose strict
mode also checks each node's types), and a node whose inputs are all constants (Shape of
a tensor, Gather, Unsqueeze, Concat, Cast ... of shapes) is evaluated on the spot with
onnx's own reference implementation: shape arithmetic becomes constants, as torch.onnx
writes a model traced at one input shape. Initializers a module does not take become
buffers.

Anything else — a node of an unknown op or domain, an opset outside OPSETS, an attribute
value the mapping does not express, a malformed or truncated file, external data that is
missing — is a fuselage.OnnxImportError naming the node and what was expected.
"""

import operator
import os
import re

import numpy as np
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from fuselage.errors import OnnxImportError

OPSETS = range(13, 19)   # the default domain's opsets read here (torchvision exports 17)
# The most elements a tensor the import makes may have (a graph input's zeros, a folded
# constant, a resize or pad): 1 GiB of float32. A hostile shape is an error, never an
# allocation that takes the machine down.
MAX_ELEMENTS = 1 << 28
MAX_RANK = 8
ONNX_META, ONNX_NODE_META = "onnx", "onnx_node"  # node.meta["fuselage"] keys


def _load(model):
    """The onnx.ModelProto of `model` (a path or a ModelProto) with its external data read
    (a ModelProto given is never changed: its external data cannot be found)."""
    try:
        import onnx
        import onnx.checker
    except ImportError as e:
        raise OnnxImportError(f"from_onnx needs the onnx package ({e}); pip install onnx") \
            from e
    if isinstance(model, (str, os.PathLike)):
        shown = os.fspath(model)
        try:
            with open(shown, "rb") as f:
                data = f.read()
        except OSError as e:
            raise OnnxImportError(f"cannot read '{shown}': {e.strerror}") from None
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(data)
        except Exception as e:  # google.protobuf.message.DecodeError, RuntimeWarning
            raise OnnxImportError(f"'{shown}' is not an ONNX model (malformed or truncated "
                                  f"protobuf: {e})") from None
        if not proto.graph.node and not proto.graph.output:
            raise OnnxImportError(f"'{shown}' is not an ONNX model: it has no graph (an empty "
                                  "or truncated file?)")
        base = os.path.dirname(os.path.abspath(shown))
    elif isinstance(model, onnx.ModelProto):
        proto, base = model, None
    else:
        raise OnnxImportError(f"from_onnx: model is a {type(model).__name__}; expected the "
                              "path of an ONNX file or an onnx.ModelProto")
    _load_external_data(proto, base)
    return proto


def _check(proto):
    """onnx.checker on a model whose opset and ops fuselage reads."""
    import onnx.checker
    try:
        onnx.checker.check_model(proto)
    except Exception as e:  # onnx.checker.ValidationError and what the C++ checker throws
        raise OnnxImportError(f"the ONNX model does not pass onnx.checker: {e}") from None


def _check_ops(proto):
    """Every node of a domain and op fuselage reads, before anything else looks at them."""
    for node in proto.graph.node:
        if node.domain not in ("", "ai.onnx"):
            raise OnnxImportError(f"{_where(node)}: domain '{node.domain}'; fuselage reads "
                                  "the default ONNX domain's ops")
        if node.op_type not in _OPS and node.op_type not in _FOLD_ONLY:
            raise OnnxImportError(
                f"{_where(node)}: op '{node.op_type}' is not one fuselage reads (it reads "
                f"{', '.join(sorted(set(_OPS) | set(_FOLD_ONLY)))})")


def _external(tensor):
    import onnx
    return tensor.HasField("data_location") and \
        tensor.data_location == onnx.TensorProto.EXTERNAL


def _load_external_data(proto, base):
    """Reads each initializer's external data (its file beside the model), checking that
    the file exists, stays inside the model's folder and holds the bytes it names."""
    from onnx.external_data_helper import load_external_data_for_tensor
    for tensor in list(proto.graph.initializer):
        if not _external(tensor):
            continue
        info = {e.key: e.value for e in tensor.external_data}
        where = f"initializer '{tensor.name}'"
        if base is None:
            raise OnnxImportError(f"{where}: its data is external ('{info.get('location')}') "
                                  "and the model was given as a ModelProto; pass the file's "
                                  "path, or load it with onnx.load first")
        location = info.get("location", "")
        path = os.path.normpath(os.path.join(base, location))
        if os.path.isabs(location) or not path.startswith(base + os.sep):
            raise OnnxImportError(f"{where}: external data location '{location}' is outside "
                                  "the model's folder")
        if not os.path.isfile(path):
            raise OnnxImportError(f"{where}: its external data file '{location}' is missing "
                                  f"(expected at {path})")
        try:
            load_external_data_for_tensor(tensor, base)
        except Exception as e:
            raise OnnxImportError(f"{where}: cannot read its external data from "
                                  f"'{location}': {e}") from None
        expected = int(np.prod(tensor.dims)) * _itemsize(tensor)
        if len(tensor.raw_data) != expected:
            raise OnnxImportError(f"{where}: its external data holds {len(tensor.raw_data)} "
                                  f"bytes; its shape {list(tensor.dims)} needs {expected}")
        del tensor.external_data[:]
        tensor.data_location = 0  # DEFAULT


def _itemsize(tensor):
    import onnx.helper
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize


def _array(tensor, where):
    import onnx.numpy_helper
    try:
        return onnx.numpy_helper.to_array(tensor).copy()
    except Exception as e:
        raise OnnxImportError(f"{where}: tensor '{tensor.name}' cannot be read: {e}") from None


def _attributes(node):
    import onnx.helper
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


_NAME = re.compile(r"[^0-9a-zA-Z_]+")


class _Reader:
    """The state of one import: the fx graph being built, the root module, the value of
    each ONNX name (an fx Node or a numpy constant), and each tensor's static shape."""

    def __init__(self, proto, opset):
        self.proto, self.opset = proto, opset
        self.graph = torch.fx.Graph()
        self.root = nn.Module()
        self.values = {}
        self.example = {}        # fx node -> its value on the example (zero) inputs
        self.names = set()
        self.onnx_node_of = {}   # fx node name / module name -> the ONNX node's name

    # ---- helpers for the op emitters -----------------------------------------------------

    def fresh(self, base):
        name = _NAME.sub("_", base).strip("_") or "v"
        if name[0].isdigit():
            name = "_" + name
        candidate, i = name, 0
        while candidate in self.names or hasattr(self.root, candidate):
            i += 1
            candidate = f"{name}_{i}"
        self.names.add(candidate)
        return candidate

    def _run(self, node):
        """Computes `node` on the example values of its inputs: every tensor's shape is
        then known exactly, whatever ONNX shape inference says."""
        args = torch.fx.node.map_arg(node.args, self.example.__getitem__)
        kwargs = torch.fx.node.map_arg(node.kwargs, self.example.__getitem__)
        with torch.no_grad():
            if node.op == "call_module":
                value = self.root.get_submodule(node.target)(*args, **kwargs)
            elif node.op == "call_function":
                value = node.target(*args, **kwargs)
            else:  # get_attr
                value = getattr(self.root, node.target)
        self.example[node] = value
        return node

    def placeholder(self, name, shape):
        node = self.graph.placeholder(self.fresh(name))
        self.example[node] = torch.zeros(shape)
        return node

    def _spelled(self, node, onnx_node):
        # The source spelling, as from_exported keeps an aten op's (DESIGN.md, "Front
        # ends"): the ONNX op and node, carried into a model file's node meta.
        node.meta["fuselage"] = {ONNX_META: onnx_node.op_type,
                                 ONNX_NODE_META: onnx_node.name}
        return self._run(node)

    def module(self, onnx_node, module, *inputs):
        name = self.fresh(onnx_node.name or onnx_node.output[0])
        self.root.add_module(name, module)
        self.onnx_node_of[name] = onnx_node.name
        return self._spelled(self.graph.create_node("call_module", name, tuple(inputs), {},
                                                    name=name), onnx_node)

    def call(self, onnx_node, fn, *args, **kwargs):
        name = self.fresh(onnx_node.name or onnx_node.output[0])
        self.onnx_node_of[name] = onnx_node.name
        return self._spelled(self.graph.create_node("call_function", fn, tuple(args), kwargs,
                                                    name=name), onnx_node)

    def item(self, onnx_node, container, index):
        return self.call(onnx_node, operator.getitem, container, index)

    def tensor(self, value, name):
        """An fx node of `value`: itself, or a numpy constant as a buffer (get_attr)."""
        if isinstance(value, torch.fx.Node):
            return value
        target = self.fresh(name)
        self.root.register_buffer(target, torch.tensor(value))
        return self._run(self.graph.create_node("get_attr", target, (), {}, name=target))

    def operand(self, value, name, other=None):
        """A binary op's operand: a tensor node, a one-element float constant as a Python
        number (`x + 1.5`: what fuselage quantizes as a scalar) where that broadcasts
        alike (the `other` operand has at least its rank), else a buffer."""
        if isinstance(value, np.ndarray) and value.size == 1 and \
                value.dtype.kind == "f" and isinstance(other, torch.fx.Node) and \
                value.ndim <= self.example[other].dim():
            return float(value.reshape(()))
        return self.tensor(value, name)

    def shape(self, onnx_node, name):
        """The shape of the ONNX value `name` (a tensor's on the example inputs)."""
        value = self.values[name]
        if isinstance(value, np.ndarray):
            return tuple(value.shape)
        return tuple(self.example[value].shape)


def _where(node):
    return f"node '{node.name}' ({node.op_type})" if node.name else \
        f"the {node.op_type} node writing '{node.output[0]}'"


def _constant(reader, node, value, what):
    if not isinstance(value, np.ndarray):
        raise OnnxImportError(f"{_where(node)}: its {what} is computed at run time; fuselage "
                              "reads it as a constant (an initializer or static shape "
                              "arithmetic)")
    return value


def _guard_size(node, shape, what):
    """An OnnxImportError if a tensor of `shape` would be too large to make."""
    shape = [int(d) for d in shape]
    if len(shape) > MAX_RANK or any(d < 0 for d in shape) or \
            int(np.prod(shape, dtype=object)) > MAX_ELEMENTS:
        raise OnnxImportError(f"{_where(node)}: {what} of shape {shape[:16]}; fuselage makes "
                              f"tensors of rank <= {MAX_RANK} and <= {MAX_ELEMENTS} elements")


def _fold_size(node, inputs):
    """Checks the size of what folding an op that makes tensors from numbers would make."""
    def ints(i):
        return _ints(inputs[i]) if len(inputs) > i and inputs[i] is not None else []
    if node.op_type == "ConstantOfShape":
        _guard_size(node, ints(0), "a constant")
    elif node.op_type == "Expand" and inputs[0] is not None:
        shape = list(np.shape(inputs[0]))
        target = ints(1)
        rank = max(len(shape), len(target))
        shape = [1] * (rank - len(shape)) + shape
        target = [1] * (rank - len(target)) + target
        _guard_size(node, [max(a, b) for a, b in zip(shape, target)], "an expanded constant")
    elif node.op_type == "Tile" and inputs[0] is not None:
        _guard_size(node, [a * b for a, b in zip(np.shape(inputs[0]), ints(1))],
                    "a tiled constant")
    elif node.op_type == "Range" and all(v is not None for v in inputs[:3]):
        start, limit, delta = (float(np.asarray(v).reshape(())) for v in inputs[:3])
        count = np.ceil((limit - start) / delta) if delta else np.inf
        if not np.isfinite(count) or count > MAX_ELEMENTS:
            raise OnnxImportError(f"{_where(node)}: a range of {count} elements; fuselage "
                                  f"makes tensors of <= {MAX_ELEMENTS} elements")


def _axis(node, axis, rank, what="axis"):
    """`axis` in [0, rank), from ONNX's [-rank, rank); another value names the node."""
    axis = int(axis)
    if not -rank <= axis < rank:
        raise OnnxImportError(f"{_where(node)}: {what} {axis} for an input of rank {rank}; "
                              f"expected one in [{-rank}, {rank - 1}]")
    return axis % rank


def _ints(value):
    return [int(v) for v in np.asarray(value).reshape(-1)]


# ---- the op table: ONNX op -> emitter(reader, node, inputs, attributes) -> outputs -------

_OPS = {}


def _op(*names):
    def register(fn):
        for name in names:
            _OPS[name] = fn
        return fn
    return register


def _symmetric_pads(node, pads, rank):
    """torch's padding of ONNX `pads` [b1, .., bn, e1, .., en], or None if asymmetric."""
    pads = list(pads) if pads else [0] * (2 * rank)
    begin, end = pads[:rank], pads[rank:]
    return tuple(begin) if begin == end else None


def _pad_first(reader, node, x, pads, rank, value=0.0):
    """`x` padded by F.pad with the asymmetric ONNX `pads` of the last `rank` dims."""
    begin, end = pads[:rank], pads[rank:]
    torch_pads = []
    for b, e in zip(reversed(begin), reversed(end)):
        torch_pads += [b, e]
    return reader.call(node, F.pad, x, tuple(torch_pads), "constant", value)


def _no_auto_pad(node, attrs):
    auto_pad = attrs.get("auto_pad", b"NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad not in ("NOTSET", "VALID"):
        raise OnnxImportError(f"{_where(node)}: auto_pad {auto_pad}; fuselage reads explicit "
                              "pads (NOTSET) or VALID")


@_op("Conv")
def _conv(reader, node, inputs, attrs):
    x, w = inputs[0], _constant(reader, node, inputs[1], "weight (input 1)")
    b = inputs[2] if len(inputs) > 2 else None
    if b is not None:
        b = _constant(reader, node, b, "bias (input 2)")
    _no_auto_pad(node, attrs)
    rank = w.ndim - 2
    if rank not in (1, 2, 3):
        raise OnnxImportError(f"{_where(node)}: a weight of rank {w.ndim}; fuselage reads "
                              "1-, 2- and 3-d convolutions")
    kernel = tuple(attrs.get("kernel_shape", w.shape[2:]))
    if tuple(kernel) != tuple(w.shape[2:]):
        raise OnnxImportError(f"{_where(node)}: kernel_shape {list(kernel)} differs from the "
                              f"weight's {list(w.shape[2:])}")
    pads = attrs.get("pads", [0] * 2 * rank)
    padding = _symmetric_pads(node, pads, rank)
    if padding is None:
        x = _pad_first(reader, node, x, list(pads), rank)
        padding = (0,) * rank
    group = int(attrs.get("group", 1))
    conv = (nn.Conv1d, nn.Conv2d, nn.Conv3d)[rank - 1](
        w.shape[1] * group, w.shape[0], kernel, stride=tuple(attrs.get("strides", [1] * rank)),
        padding=padding, dilation=tuple(attrs.get("dilations", [1] * rank)), groups=group,
        bias=b is not None)
    with torch.no_grad():
        conv.weight.copy_(torch.tensor(w))
        if b is not None:
            conv.bias.copy_(torch.tensor(b))
    return [reader.module(node, conv.eval(), x)]


@_op("BatchNormalization")
def _batch_norm(reader, node, inputs, attrs):
    if attrs.get("training_mode", 0):
        raise OnnxImportError(f"{_where(node)}: training_mode=1; fuselage reads inference "
                              "batch norms (training_mode=0)")
    if len(node.output) > 1 and any(node.output[1:]):
        raise OnnxImportError(f"{_where(node)}: its running statistics are outputs; fuselage "
                              "reads inference batch norms with one output")
    x = inputs[0]
    scale, bias, mean, var = (_constant(reader, node, v, what) for v, what in
                              zip(inputs[1:5], ("scale", "B", "input_mean", "input_var")))
    rank = len(reader.shape(node, node.input[0]))
    if rank not in (2, 3, 4, 5):
        raise OnnxImportError(f"{_where(node)}: an input of rank {rank}; fuselage reads rank "
                              "2 to 5")
    bn = {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}[rank](
        scale.shape[0], eps=float(attrs.get("epsilon", 1e-5)),
        momentum=1 - float(attrs.get("momentum", 0.9)))
    with torch.no_grad():
        bn.weight.copy_(torch.tensor(scale))
        bn.bias.copy_(torch.tensor(bias))
        bn.running_mean.copy_(torch.tensor(mean))
        bn.running_var.copy_(torch.tensor(var))
    return [reader.module(node, bn.eval(), x)]


@_op("Relu")
def _relu(reader, node, inputs, attrs):
    return [reader.module(node, nn.ReLU(), inputs[0])]


@_op("Sigmoid")
def _sigmoid(reader, node, inputs, attrs):
    return [reader.call(node, torch.sigmoid, inputs[0])]


@_op("HardSwish")
def _hardswish(reader, node, inputs, attrs):
    return [reader.module(node, nn.Hardswish(), inputs[0])]


@_op("HardSigmoid")
def _hardsigmoid(reader, node, inputs, attrs):
    alpha, beta = float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5))
    if abs(alpha - 1 / 6) > 1e-6 or abs(beta - 0.5) > 1e-6:
        raise OnnxImportError(f"{_where(node)}: alpha={alpha}, beta={beta}; fuselage reads "
                              "PyTorch's hardsigmoid, alpha=1/6 and beta=0.5")
    return [reader.module(node, nn.Hardsigmoid(), inputs[0])]


@_op("Tanh")
def _tanh(reader, node, inputs, attrs):
    return [reader.call(node, torch.tanh, inputs[0])]


@_op("Clip")
def _clip(reader, node, inputs, attrs):
    bounds = []
    for i, what in ((1, "min (input 1)"), (2, "max (input 2)")):
        value = inputs[i] if len(inputs) > i else None
        bounds.append(None if value is None else
                      float(_constant(reader, node, value, what).reshape(())))
    lo, hi = bounds
    x = inputs[0]
    if lo == 0.0 and hi == 6.0:
        return [reader.module(node, nn.ReLU6(), x)]
    if lo == 0.0 and hi is None:
        return [reader.module(node, nn.ReLU(), x)]
    if lo is not None and hi is not None:
        return [reader.module(node, nn.Hardtanh(lo, hi), x)]
    return [reader.call(node, torch.clamp, x, lo, hi)]


def _binary(fn):
    def emit(reader, node, inputs, attrs):
        a, b = inputs
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            return [_fold(reader, node, inputs, attrs)[0]]
        return [reader.call(node, fn, reader.operand(a, node.input[0], b),
                            reader.operand(b, node.input[1], a))]
    return emit


for _name, _fn in (("Add", operator.add), ("Sub", operator.sub), ("Mul", operator.mul),
                   ("Div", operator.truediv)):
    _OPS[_name] = _binary(_fn)


def _linear(reader, node, x, weight, bias):
    linear = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    with torch.no_grad():
        linear.weight.copy_(torch.tensor(weight))
        if bias is not None:
            linear.bias.copy_(torch.tensor(bias))
    return reader.module(node, linear.eval(), x)


@_op("Gemm")
def _gemm(reader, node, inputs, attrs):
    a = inputs[0]
    b = _constant(reader, node, inputs[1], "B (input 1)")
    c = inputs[2] if len(inputs) > 2 else None
    if attrs.get("transA", 0):
        raise OnnxImportError(f"{_where(node)}: transA=1; fuselage reads Gemm as a linear "
                              "layer, transA=0")
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    weight = b if attrs.get("transB", 0) else b.T
    weight = weight * alpha if alpha != 1.0 else weight
    bias = None
    if c is not None:
        c = _constant(reader, node, c, "C (input 2)") * beta
        if c.size == weight.shape[0] and c.ndim <= 1 or c.shape == (1, weight.shape[0]):
            bias = c.reshape(-1).astype(np.float32)
        elif c.size == 1:
            bias = np.full(weight.shape[0], float(c.reshape(())), np.float32)
        else:
            raise OnnxImportError(f"{_where(node)}: C of shape {list(c.shape)}; fuselage reads "
                                  f"a bias of shape [{weight.shape[0]}] or a scalar")
    return [_linear(reader, node, a, weight.astype(np.float32), bias)]


@_op("MatMul")
def _matmul(reader, node, inputs, attrs):
    a, b = inputs
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return [_fold(reader, node, inputs, attrs)[0]]
    if isinstance(b, np.ndarray) and b.ndim == 2:
        return [_linear(reader, node, a, b.T, None)]
    return [reader.call(node, torch.matmul, reader.tensor(a, node.input[0]),
                        reader.tensor(b, node.input[1]))]


def _pool_attributes(node, attrs, rank):
    _no_auto_pad(node, attrs)
    kernel = tuple(attrs["kernel_shape"])
    strides = tuple(attrs.get("strides", [1] * rank))
    padding = _symmetric_pads(node, attrs.get("pads"), rank)
    if padding is None:
        raise OnnxImportError(f"{_where(node)}: asymmetric pads {list(attrs['pads'])}; "
                              "fuselage reads pools padded alike on both sides")
    return kernel, strides, padding


@_op("MaxPool")
def _max_pool(reader, node, inputs, attrs):
    if len(node.output) > 1 and node.output[1]:
        raise OnnxImportError(f"{_where(node)}: its Indices output is read; fuselage reads "
                              "MaxPool with one output")
    if attrs.get("storage_order", 0):
        raise OnnxImportError(f"{_where(node)}: storage_order=1; expected 0")
    rank = len(attrs["kernel_shape"])
    kernel, strides, padding = _pool_attributes(node, attrs, rank)
    cls = {1: nn.MaxPool1d, 2: nn.MaxPool2d, 3: nn.MaxPool3d}[rank]
    pool = cls(kernel, strides, padding, dilation=tuple(attrs.get("dilations", [1] * rank)),
               ceil_mode=bool(attrs.get("ceil_mode", 0)))
    return [reader.module(node, pool, inputs[0])]


@_op("AveragePool")
def _avg_pool(reader, node, inputs, attrs):
    rank = len(attrs["kernel_shape"])
    kernel, strides, padding = _pool_attributes(node, attrs, rank)
    cls = {1: nn.AvgPool1d, 2: nn.AvgPool2d, 3: nn.AvgPool3d}[rank]
    pool = cls(kernel, strides, padding, ceil_mode=bool(attrs.get("ceil_mode", 0)),
               count_include_pad=bool(attrs.get("count_include_pad", 0)))
    return [reader.module(node, pool, inputs[0])]


@_op("GlobalAveragePool")
def _global_avg_pool(reader, node, inputs, attrs):
    rank = len(reader.shape(node, node.input[0])) - 2
    cls = {1: nn.AdaptiveAvgPool1d, 2: nn.AdaptiveAvgPool2d, 3: nn.AdaptiveAvgPool3d}.get(rank)
    if cls is None:
        raise OnnxImportError(f"{_where(node)}: an input of rank {rank + 2}; expected 3 to 5")
    return [reader.module(node, cls(1), inputs[0])]


@_op("ReduceMean")
def _reduce_mean(reader, node, inputs, attrs):
    if len(inputs) > 1 and inputs[1] is not None:   # opset 18: axes as an input
        axes = _ints(_constant(reader, node, inputs[1], "axes (input 1)"))
    else:
        axes = attrs.get("axes")
    rank = len(reader.shape(node, node.input[0]))
    if not axes:
        if attrs.get("noop_with_empty_axes", 0):
            return [inputs[0]]
        axes = list(range(rank))
    axes = [_axis(node, a, rank, "axes entry") for a in axes]
    return [reader.call(node, torch.mean, inputs[0], axes, bool(attrs.get("keepdims", 1)))]


@_op("Flatten")
def _flatten(reader, node, inputs, attrs):
    shape = reader.shape(node, node.input[0])
    axis = _axis(node, attrs.get("axis", 1), len(shape) + 1)
    if axis == 1:
        return [reader.call(node, torch.flatten, inputs[0], 1)]
    out = (int(np.prod(shape[:axis])), int(np.prod(shape[axis:])))
    return [reader.call(node, torch.reshape, inputs[0], out)]


def _static_reshape(reader, node, x, target):
    return [reader.call(node, torch.reshape, x, tuple(int(d) for d in target))]


@_op("Reshape")
def _reshape(reader, node, inputs, attrs):
    x, shape = inputs[0], _ints(_constant(reader, node, inputs[1], "shape (input 1)"))
    if isinstance(x, np.ndarray):
        return [_fold(reader, node, inputs, attrs)[0]]
    in_shape = reader.shape(node, node.input[0])
    if attrs.get("allowzero", 0) and 0 in shape:
        raise OnnxImportError(f"{_where(node)}: allowzero=1 with a 0 in the shape; expected "
                              "allowzero=0")
    target = [in_shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return _static_reshape(reader, node, x, target)


def _to_static_shape(reader, node, inputs, attrs):
    """Squeeze / Unsqueeze of a tensor: a reshape to the shape the op gives a zero array of
    the input's shape."""
    if all(isinstance(v, np.ndarray) or v is None for v in inputs):
        return [_fold(reader, node, inputs, attrs)[0]]
    zeros = np.zeros(reader.shape(node, node.input[0]), np.float32)
    out = _fold(reader, node, [zeros] + list(inputs[1:]), attrs)[0].shape
    return _static_reshape(reader, node, inputs[0], out)


_OPS["Squeeze"] = _OPS["Unsqueeze"] = _to_static_shape


@_op("Transpose")
def _transpose(reader, node, inputs, attrs):
    if isinstance(inputs[0], np.ndarray):
        return [_fold(reader, node, inputs, attrs)[0]]
    rank = len(reader.shape(node, node.input[0]))
    perm = [int(p) for p in attrs.get("perm", list(reversed(range(rank))))]
    if sorted(perm) != list(range(rank)):
        raise OnnxImportError(f"{_where(node)}: perm {perm} is not a permutation of the "
                              f"{rank} axes")
    return [reader.call(node, torch.permute, inputs[0], tuple(perm))]


@_op("Concat")
def _concat(reader, node, inputs, attrs):
    if all(isinstance(v, np.ndarray) for v in inputs):
        return [_fold(reader, node, inputs, attrs)[0]]
    tensors = [reader.tensor(v, name) for v, name in zip(inputs, node.input)]
    axis = _axis(node, attrs["axis"], len(reader.shape(node, node.input[0])))
    return [reader.call(node, torch.cat, tensors, axis)]


@_op("Softmax")
def _softmax(reader, node, inputs, attrs):
    axis = _axis(node, attrs.get("axis", -1), len(reader.shape(node, node.input[0])))
    return [reader.call(node, torch.softmax, inputs[0], axis)]


@_op("Identity", "Dropout")
def _identity(reader, node, inputs, attrs):
    if node.op_type == "Dropout" and len(node.output) > 1 and node.output[1]:
        raise OnnxImportError(f"{_where(node)}: its mask output is read; fuselage reads "
                              "inference dropout")
    return [inputs[0]]


@_op("Constant")
def _constant_node(reader, node, inputs, attrs):
    if "value" in attrs:
        return [_array(attrs["value"], _where(node))]
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64),
                       ("value_floats", np.float32), ("value_ints", np.int64)):
        if key in attrs:
            return [np.asarray(attrs[key], dtype=dtype)]
    raise OnnxImportError(f"{_where(node)}: a Constant of {sorted(attrs)}; fuselage reads "
                          "value, value_float(s) and value_int(s)")


@_op("Shape")
def _shape(reader, node, inputs, attrs):
    shape = np.asarray(inputs[0].shape if isinstance(inputs[0], np.ndarray) else
                       reader.shape(node, node.input[0]), dtype=np.int64)
    start, end = attrs.get("start", 0), attrs.get("end", len(shape))
    return [shape[start:end]]


@_op("Pad")
def _pad(reader, node, inputs, attrs):
    mode = attrs.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode != "constant":
        raise OnnxImportError(f"{_where(node)}: mode '{mode}'; fuselage reads constant "
                              "padding")
    pads = _ints(_constant(reader, node, inputs[1], "pads (input 1)"))
    value = 0.0
    if len(inputs) > 2 and inputs[2] is not None:
        value = float(_constant(reader, node, inputs[2], "constant_value").reshape(()))
    if len(inputs) > 3 and inputs[3] is not None:
        raise OnnxImportError(f"{_where(node)}: the axes input (opset 18); expected pads "
                              "of every axis")
    rank = len(pads) // 2
    shape = reader.shape(node, node.input[0])
    if len(pads) != 2 * len(shape):
        raise OnnxImportError(f"{_where(node)}: {len(pads)} pads for an input of rank "
                              f"{len(shape)}; expected {2 * len(shape)}")
    _guard_size(node, [d + b + e for d, b, e in zip(shape, pads[:rank], pads[rank:])],
                "a padded tensor")
    return [_pad_first(reader, node, inputs[0], pads, rank, value)]


@_op("Slice")
def _slice(reader, node, inputs, attrs):
    if isinstance(inputs[0], np.ndarray):
        return [_fold(reader, node, inputs, attrs)[0]]
    shape = reader.shape(node, node.input[0])
    starts = _ints(_constant(reader, node, inputs[1], "starts (input 1)"))
    ends = _ints(_constant(reader, node, inputs[2], "ends (input 2)"))
    axes = _ints(_constant(reader, node, inputs[3], "axes")) if len(inputs) > 3 and \
        inputs[3] is not None else list(range(len(starts)))
    steps = _ints(_constant(reader, node, inputs[4], "steps")) if len(inputs) > 4 and \
        inputs[4] is not None else [1] * len(starts)
    x = inputs[0]
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = _axis(node, axis, len(shape), "axes entry")
        begin, stop, stride = slice(start, end, step).indices(shape[axis])
        if step != 1:
            raise OnnxImportError(f"{_where(node)}: step {step} on axis {axis}; fuselage "
                                  "reads slices of step 1")
        if (begin, stop) == (0, shape[axis]):
            continue
        x = reader.call(node, torch.narrow, x, axis, begin, max(stop - begin, 0))
    return [x]


@_op("Split")
def _split(reader, node, inputs, attrs):
    shape = reader.shape(node, node.input[0])
    axis = _axis(node, attrs.get("axis", 0), len(shape))
    if len(inputs) > 1 and inputs[1] is not None:
        sizes = _ints(_constant(reader, node, inputs[1], "split (input 1)"))
    elif "split" in attrs:
        sizes = list(attrs["split"])
    else:
        n = len(node.output)
        if shape[axis] % n:
            raise OnnxImportError(f"{_where(node)}: {shape[axis]} does not split into {n} "
                                  "equal parts")
        sizes = [shape[axis] // n] * n
    if len(sizes) != len(node.output) or sum(sizes) != shape[axis] or min(sizes) < 0:
        raise OnnxImportError(f"{_where(node)}: split sizes {sizes} for {len(node.output)} "
                              f"outputs of an axis of {shape[axis]}; expected one size per "
                              "output, summing to the axis")
    parts = reader.call(node, torch.split, inputs[0], sizes, axis)
    return [reader.item(node, parts, i) for i in range(len(node.output))]


@_op("Resize")
def _resize(reader, node, inputs, attrs):
    def text(key, default):
        value = attrs.get(key, default)
        return value.decode() if isinstance(value, bytes) else value
    mode = text("mode", "nearest")
    transform = text("coordinate_transformation_mode", "half_pixel")
    nearest = text("nearest_mode", "round_prefer_floor")
    shape = reader.shape(node, node.input[0])
    if len(inputs) > 3 and inputs[3] is not None:
        out = _ints(_constant(reader, node, inputs[3], "sizes (input 3)"))
    elif len(inputs) > 2 and inputs[2] is not None:
        scales = _constant(reader, node, inputs[2], "scales (input 2)").reshape(-1)
        out = [int(np.floor(d * float(f))) for d, f in zip(shape, scales)]
    else:
        raise OnnxImportError(f"{_where(node)}: neither scales nor sizes; expected one")
    if text("keep_aspect_ratio_policy", "stretch") != "stretch" or "axes" in attrs:
        raise OnnxImportError(f"{_where(node)}: axes or keep_aspect_ratio_policy; fuselage "
                              "reads resizes of every axis, stretched")
    _guard_size(node, out, "a resized tensor")
    if len(out) != len(shape) or list(out[:2]) != list(shape[:2]):
        raise OnnxImportError(f"{_where(node)}: resizes the batch or channel axis; fuselage "
                              "reads resizes of the spatial axes")
    size = tuple(int(d) for d in out[2:])
    if mode == "nearest" and transform == "asymmetric" and nearest == "floor":
        return [reader.call(node, F.interpolate, inputs[0], size, None, "nearest")]
    if mode == "linear" and transform in ("half_pixel", "pytorch_half_pixel", "align_corners"):
        torch_mode = {1: "linear", 2: "bilinear", 3: "trilinear"}.get(len(size))
        return [reader.call(node, F.interpolate, inputs[0], size, None, torch_mode,
                            transform == "align_corners")]
    raise OnnxImportError(f"{_where(node)}: mode '{mode}', coordinate_transformation_mode "
                          f"'{transform}', nearest_mode '{nearest}'; fuselage reads nearest "
                          "(asymmetric, floor) and linear (half_pixel, pytorch_half_pixel, "
                          "align_corners), as PyTorch's interpolate")


# Ops only ever evaluated on constants (shape arithmetic).
_FOLD_ONLY = ("Gather", "Cast", "ConstantOfShape", "Equal", "Where", "Range", "Floor", "Ceil",
              "Sqrt", "Neg", "Expand", "Less", "Greater", "Not", "Min", "Max", "Abs",
              "Pow", "ReduceProd", "ReduceSum", "Tile", "Size")


def _fold(reader, node, inputs, attrs):
    """The outputs of `node` on constant inputs, by onnx's reference implementation."""
    _fold_size(node, inputs)
    import onnx
    import onnx.helper
    import onnx.numpy_helper
    from onnx.reference import ReferenceEvaluator
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    single = onnx.helper.make_node(node.op_type, names, [f"out{i}" for i in
                                                         range(len(node.output))],
                                   domain=node.domain)
    single.attribute.extend(node.attribute)
    graph = onnx.helper.make_graph(
        [single], "fold", [],
        [onnx.helper.make_tensor_value_info(f"out{i}", onnx.TensorProto.UNDEFINED, None)
         for i in range(len(node.output))],
        [onnx.numpy_helper.from_array(np.asarray(v), n)
         for v, n in zip(inputs, names) if v is not None])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("",
                                                                                 reader.opset)])
    try:
        return [np.asarray(v) for v in ReferenceEvaluator(model).run(None, {})]
    except Exception as e:
        raise OnnxImportError(f"{_where(node)}: cannot evaluate it on its constant inputs: "
                              f"{e}") from None


def _inferred_shapes(proto):
    """The static shapes ONNX shape inference gives (where it gives one): the PyTorch form's
    shapes are checked against them. Its strict mode also checks every node's input types
    and ranks against the op's schema."""
    import onnx.shape_inference
    try:
        inferred = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    except Exception as e:  # a type or shape the ops' schemas do not allow
        first = re.search(r"\(op_type:(\w+), node name: ([^)]*)\): (.*)", str(e))
        if first:  # the first node it names, with what it expected there
            op_type, name, what = first.groups()
            raise OnnxImportError(f"node '{name}' ({op_type}): ONNX shape inference refuses "
                                  f"it: {what.strip()}") from None
        raise OnnxImportError(f"ONNX shape inference refuses the model: {e}") from None
    shapes = {}
    for info in inferred.graph.value_info:
        t = info.type.tensor_type
        if t.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
            if None not in dims:
                shapes[info.name] = tuple(dims)
    return shapes


def _opset(proto):
    opset = None
    for entry in proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            opset = entry.version
        elif entry.domain not in ("ai.onnx.ml",):
            pass  # a node of that domain is refused where it is met
    if opset is None:
        raise OnnxImportError("the model imports no opset of the default ONNX domain")
    if opset not in OPSETS:
        raise OnnxImportError(f"the model's opset is {opset}; fuselage reads opsets "
                              f"{OPSETS.start} to {OPSETS.stop - 1} of the default domain "
                              "(re-export with opset_version=17)")
    return opset


def _graph_inputs(proto):
    initializers = {t.name for t in proto.graph.initializer}
    return [i for i in proto.graph.input if i.name not in initializers]


def _static_inputs(proto):
    """[(name, dims)] of the graph inputs: float tensors of static, bounded shape."""
    import onnx
    inputs = []
    for info in _graph_inputs(proto):
        t = info.type.tensor_type
        if t.elem_type != onnx.TensorProto.FLOAT:
            try:
                shown = onnx.TensorProto.DataType.Name(t.elem_type)
            except ValueError:
                shown = f"{t.elem_type} (no such type)"
            raise OnnxImportError(f"graph input '{info.name}': element type {shown}; "
                                  "fuselage reads float (FLOAT) inputs")
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                for d in t.shape.dim]
        if not t.HasField("shape") or None in dims:
            raise OnnxImportError(f"graph input '{info.name}': its shape is not static "
                                  f"({[d.dim_param or d.dim_value for d in t.shape.dim]}); "
                                  "fuselage reads models of fixed input shapes (export with "
                                  "fixed sizes, no dynamic_axes)")
        if len(dims) > MAX_RANK or int(np.prod(dims, dtype=object)) > MAX_ELEMENTS:
            raise OnnxImportError(f"graph input '{info.name}': shape {dims[:16]}; fuselage "
                                  f"reads inputs of rank <= {MAX_RANK} and <= {MAX_ELEMENTS} "
                                  "elements")
        inputs.append((info.name, dims))
    return inputs


def read(model):
    """(GraphModule, reader) of `model`: the fx form and what the import knows (the ONNX
    input and output names, each fx node's ONNX node)."""
    proto = _load(model)
    opset = _opset(proto)
    _check_ops(proto)
    _check(proto)
    inputs = _static_inputs(proto)
    inferred = _inferred_shapes(proto)
    reader = _Reader(proto, opset)
    for tensor in proto.graph.initializer:
        reader.values[tensor.name] = _array(tensor, f"initializer '{tensor.name}'")
    reader.input_names, reader.input_shapes = [], []
    for name, dims in inputs:
        reader.values[name] = reader.placeholder(name, dims)
        reader.input_names.append(name)
        reader.input_shapes.append(tuple(dims))
    for node in proto.graph.node:
        emit = _OPS.get(node.op_type)
        try:
            inputs = [reader.values[name] if name else None for name in node.input]
        except KeyError as e:
            raise OnnxImportError(f"{_where(node)}: input {e} is produced by no node") from None
        attrs = _attributes(node)
        if node.op_type in _FOLD_ONLY:
            if all(v is None or isinstance(v, np.ndarray) for v in inputs):
                outputs = _fold(reader, node, inputs, attrs)
            else:
                raise OnnxImportError(f"{_where(node)}: fuselage reads {node.op_type} only on "
                                      "constants (shape arithmetic); an input here is a "
                                      "computed tensor")
        else:
            try:
                outputs = emit(reader, node, inputs, attrs)
            except OnnxImportError:
                raise
            except Exception as e:  # an attribute of the wrong type or size, say
                raise OnnxImportError(f"{_where(node)}: cannot be read with its attributes "
                                      f"{sorted(attrs)}: {type(e).__name__}: {e}") from None
        for name, value in zip(node.output, outputs):
            if not name:
                continue
            if isinstance(value, torch.fx.Node) and name in inferred and \
                    tuple(reader.example[value].shape) != inferred[name]:
                raise OnnxImportError(
                    f"{_where(node)}: its PyTorch form gives '{name}' the shape "
                    f"{list(reader.example[value].shape)} where ONNX gives "
                    f"{list(inferred[name])}; fuselage cannot read this use of "
                    f"{node.op_type} exactly")
            reader.values[name] = value
    results = []
    reader.output_names = []
    for info in proto.graph.output:
        value = reader.values.get(info.name)
        if value is None:
            raise OnnxImportError(f"graph output '{info.name}' is produced by no node")
        results.append(reader.tensor(value, info.name))
        reader.output_names.append(info.name)
    reader.graph.output(results[0] if len(results) == 1 else tuple(results))
    gm = torch.fx.GraphModule(reader.root, reader.graph, "GraphModule")
    gm.eval()
    return gm, reader


def from_onnx(model):
    """A float ONNX model (a file's path or an onnx.ModelProto) as a torch.fx.GraphModule
    of PyTorch modules and functions (nn.Conv2d, nn.BatchNorm2d, operator.add, ...), its
    initializers the modules' parameters and buffers: what fuselage.quantize_fx,
    fuselage.export and fuselage.to_onnx take. The GraphModule takes the graph inputs in
    order and returns the output (a tuple for several); shapes are those the model fixes.
    Raises fuselage.OnnxImportError naming the node and what was expected."""
    return read(model)[0]
