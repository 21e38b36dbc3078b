"""fuselage.to_onnx: a fuselage model as an ONNX file, QDQ where it is quantized.

The walk goes over the torch.fx graph fuselage gives (fuselage.onnx._record), node by
node in order, and writes each node as the ONNX nodes fuselage.onnx._ops maps it to:
  placeholder            a graph input (the example input's dtype and shape)
  get_attr               an initializer
  a call                 its emitter; if the node's result was quantized on the example
                         run, a QuantizeLinear with that result's scale and zero point
  a non-tensor result    (x.size(0), a shape) a Python constant, no node
  output                 each output a graph output; a quantized one through a
                         DequantizeLinear of its own scale and zero point
Then fuselage.onnx._qdq tidies what the QDQ form leaves (a Relu before a QuantizeLinear
moved after it as a clamp of the integers, or dropped where the QuantizeLinear clamps
alike; a DequantizeLinear → QuantizeLinear round trip), the model is checked with
onnx.checker, and the file is written whole or not at all.
"""

import functools
import inspect

import numpy as np
import torch

from fuselage import _names
from fuselage.errors import ExportError, OnnxExportError
from fuselage.onnx import _ops, _qdq, _record
from fuselage.onnx._graph import (BOOL, FLOAT, INT8, INT32, INT64, NUMPY_TYPE, UINT8,
                                  Dequantized, Float, Graph, Quantized)

OPSET = 17          # torchvision's export opset; per-axis DequantizeLinear needs 13
IR_VERSION = 8      # the IR version of opset 17, which every ONNX Runtime since 1.11 reads

_ELEM_TYPE = {torch.float32: FLOAT, torch.int64: INT64, torch.int32: INT32, torch.bool: BOOL,
              torch.uint8: UINT8, torch.int8: INT8}
_QUANTIZED_ELEM_TYPE = {torch.quint8: UINT8, torch.qint8: INT8}


def _holds_tensor(value):
    if isinstance(value, torch.Tensor):
        return True
    if isinstance(value, (list, tuple)):
        return any(_holds_tensor(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_tensor(v) for v in value.values())
    return False


def _describe(node):
    if node.op == "call_module":
        return f"node '{node.name}' (call_module {node.target})"
    target = node.target if isinstance(node.target, str) else \
        (_names.function_name(node.target) or repr(node.target))
    return f"node '{node.name}' ({node.op} {target})"


def _unwrap(node):
    return getattr(node, "_node", node)  # _ops._Renamed: a fused module's part


class Emitter:
    """The state of one export: the ONNX graph, the value of each fx node, and the
    helpers the emitters in fuselage.onnx._ops call (`cx` there)."""

    def __init__(self, gm, seen):
        self.gm, self.seen, self.g = gm, seen, Graph()
        self.values = {}  # fx node -> Float / Quantized / Dequantized, or a Python constant
        self.shapes = {}  # tensor value -> its shape on the example run

    # ---- for the emitters -----------------------------------------------------------------

    def where(self, node):
        return _describe(_unwrap(node))

    def f(self, value, base):
        """The float ONNX tensor that one reader of `value` reads."""
        if not isinstance(value, (Float, Quantized, Dequantized)):
            raise OnnxExportError(f"{base}: an input is a {type(value).__name__} where a "
                                  "tensor was expected")
        return self.g.float_input(value, base)

    def quantized_source(self, value, node=None):
        """The Quantized value behind `value` (itself, or what a Dequantized views), or
        None for a float value; with `node` given, a float value is an error."""
        if isinstance(value, Quantized):
            return value
        if isinstance(value, Dequantized):
            return value.source
        if node is not None:
            raise OnnxExportError(f"{self.where(node)}: expects a quantized tensor; its input "
                                  "is float")
        return None

    def shape_of(self, value):
        try:
            return self.shapes[value]
        except (KeyError, TypeError):
            raise OnnxExportError(f"internal: no recorded shape for {value}") from None

    def numpy_dtype(self, node):
        seen = self.seen[_unwrap(node)]
        dtype = seen.dtype if seen.dtype in _ELEM_TYPE else torch.float32
        return NUMPY_TYPE[_ELEM_TYPE[dtype]]

    def recorded_shape(self, node):
        return self.seen[_unwrap(node)].shape

    def reshape(self, float_name, node, base):
        shape = np.asarray(self.recorded_shape(node), dtype=np.int64)
        return self.g.node("Reshape", [float_name, self.g.constant(shape, "shape")], base)

    def output_qparams(self, node):
        """(scale, zero_point, elem_type) the node's result is quantized with: its own if
        it is a quantized tensor (a lowered op), else those of the quantize_per_tensor
        that alone reads it (a reference op), else None."""
        node = _unwrap(node)
        qparams = self._qparams(node)
        if qparams is not None:
            return qparams
        users = list(node.users)
        if len(users) == 1 and users[0].op == "call_function" and \
                _names.function_name(users[0].target) == "torch.quantize_per_tensor":
            return self._qparams(users[0])
        return None

    def quantize(self, float_name, node):
        scale, zero_point, elem_type = self._qparams(node, required=True)
        return self.g.quantize(float_name, scale, zero_point, elem_type, _unwrap(node).name)

    def module_emitter(self, module, node):
        type_name = _names.module_type_name(type(module))
        emit = _ops.MODULES.get(type_name)
        if emit is None:
            raise OnnxExportError(
                f"{self.where(node)}: module type {type_name or type(module).__qualname__} has "
                "no ONNX mapping (fuselage.onnx._ops.MODULES lists those that have)")
        return emit

    # ---- the walk -------------------------------------------------------------------------

    def _qparams(self, node, required=False):
        seen = self.seen[node]
        if not seen.is_quantized:
            if required:
                raise OnnxExportError(f"{self.where(node)}: its result is not quantized")
            return None
        elem_type = _QUANTIZED_ELEM_TYPE.get(seen.dtype)
        if seen.qparams is None or elem_type is None:
            raise OnnxExportError(
                f"{self.where(node)}: its result is {seen.dtype} quantized {seen.qscheme}; ONNX "
                "QDQ activations are torch.quint8 / torch.qint8 quantized per tensor")
        return seen.qparams[0], seen.qparams[1], elem_type

    def _resolve(self, arg):
        if isinstance(arg, torch.fx.Node):
            return self.values[arg]
        if isinstance(arg, (list, tuple)):
            return type(arg)(self._resolve(a) for a in arg)
        if isinstance(arg, dict):
            return {k: self._resolve(v) for k, v in arg.items()}
        return arg

    def _emitter(self, node):
        """(emitter, the arguments it takes before the node's own)."""
        if node.op == "call_module":
            module = self.gm.get_submodule(node.target)
            return self.module_emitter(module, node), (self, node, module)
        if node.op == "call_function":
            emit = _ops.FUNCTIONS.get(_names.function_name(node.target))
        else:
            emit = _ops.METHODS.get(node.target)
        if emit is None:
            raise OnnxExportError(f"{self.where(node)} has no ONNX mapping (the ops that have "
                                  "one are listed in fuselage.onnx._ops)")
        return emit, (self, node)

    def _call(self, node):
        emit, leading = self._emitter(node)
        args = leading + tuple(self._resolve(node.args))
        kwargs = self._resolve(node.kwargs)
        try:
            _signature(emit).bind(*args, **kwargs)
        except TypeError as e:
            raise OnnxExportError(f"{self.where(node)}: arguments its ONNX mapping does not "
                                  f"take: {e}") from None
        result = emit(*args, **kwargs)
        if isinstance(result, str):  # a float ONNX tensor
            if self.seen[node].is_quantized:
                return self.quantize(result, node)
            return Float(result)
        if isinstance(result, tuple):  # the parts of a multi-output op (chunk, split)
            for part, value in zip(result, self.seen[node].python):
                self.shapes.setdefault(part, tuple(value.shape))
        return result

    def _input(self, node):
        seen = self.seen[node]
        if not seen.is_tensor or seen.dtype not in _ELEM_TYPE:
            raise OnnxExportError(f"input '{node.name}': an ONNX graph input is a float or "
                                  f"integer tensor; the example gives "
                                  f"{seen.dtype or type(seen.python).__name__}")
        import onnx.helper

        name = self.g.fresh(node.name)
        self.g.inputs.append(onnx.helper.make_tensor_value_info(
            name, _ELEM_TYPE[seen.dtype], list(seen.shape)))
        return Float(name)

    def _attribute(self, node):
        value = _fetch_attr(self.gm, node.target)
        if value.is_quantized:
            if value.dtype not in _QUANTIZED_ELEM_TYPE or \
                    value.qscheme() != torch.per_tensor_affine:
                raise OnnxExportError(f"{self.where(node)}: a {value.dtype} {value.qscheme()} "
                                      "constant has no ONNX form")
            name = self.g.constant(value.int_repr().numpy(), node.name)
            return Quantized(name, float(value.q_scale()), int(value.q_zero_point()),
                             _QUANTIZED_ELEM_TYPE[value.dtype])
        if value.dtype not in _ELEM_TYPE:
            raise OnnxExportError(f"{self.where(node)}: a {value.dtype} tensor has no ONNX "
                                  "form here (float32, int64, int32, bool, uint8, int8)")
        return Float(self.g.constant(value.detach().numpy(), node.name))

    def _outputs(self, node):
        import onnx.helper

        leaves = []
        _flatten_output(node.args[0], leaves)
        inputs = {i.name for i in self.g.inputs}
        taken = set()
        for leaf in leaves:
            if not isinstance(leaf, torch.fx.Node) or not self.seen[leaf].is_tensor:
                raise OnnxExportError(f"output: '{leaf}' is not a tensor; ONNX outputs are "
                                      "tensors")
            value = self.values[leaf]
            if isinstance(value, Float):
                name = value.name
                if name in inputs or name in taken or name in self._initializer_names():
                    name = self.g.node("Identity", [name], leaf.name)
                elem_type = _ELEM_TYPE.get(self.seen[leaf].dtype, FLOAT)
            else:
                # A quantized output leaves as float, through a DequantizeLinear of its own
                # scale and zero point: ONNX has no quantized tensor type.
                name = self.g.dequantize(self.quantized_source(value), leaf.name)
                elem_type = FLOAT
            taken.add(name)
            self.g.outputs.append(onnx.helper.make_tensor_value_info(
                name, elem_type, list(self.seen[leaf].shape)))

    def _initializer_names(self):
        return {t.name for t in self.g.initializers}

    def walk(self):
        for node in self.gm.graph.nodes:
            if node.op == "output":
                self._outputs(node)
                continue
            if node not in self.seen:
                continue  # never ran (an unused branch of the graph): nothing to write
            seen = self.seen[node]
            if node.op == "placeholder":
                self.values[node] = self._input(node)
            elif not seen.is_tensor and not _holds_tensor(seen.python):
                self.values[node] = seen.python  # shape arithmetic, a flag: a constant
            elif node.op == "get_attr":
                self.values[node] = self._attribute(node)
            else:
                self.values[node] = self._call(node)
            if seen.is_tensor:
                self.shapes.setdefault(self.values[node], seen.shape)


@functools.lru_cache(maxsize=None)
def _signature(emit):
    return inspect.signature(emit)


def _fetch_attr(gm, target):
    value = gm
    for part in target.split("."):
        value = getattr(value, part)
    return value


def _flatten_output(arg, leaves):
    if isinstance(arg, (list, tuple)):
        for a in arg:
            _flatten_output(a, leaves)
    elif isinstance(arg, dict):
        for a in arg.values():
            _flatten_output(a, leaves)
    else:
        leaves.append(arg)


def build(model, example_inputs=None):
    """The onnx.ModelProto of `model` (what to_onnx writes), checked by onnx.checker."""
    try:
        import onnx
        import onnx.checker
        import onnx.helper
        import onnx.shape_inference
    except ImportError as e:
        raise OnnxExportError(f"to_onnx needs the onnx package ({e}); pip install onnx") from e
    gm = _record.graph_module(model, example_inputs)
    emitter = Emitter(gm, _record.record(gm, example_inputs))
    emitter.walk()
    g = emitter.g
    _qdq.tidy(g)
    graph = onnx.helper.make_graph(g.nodes, "fuselage", g.inputs, g.outputs, g.initializers)
    proto = onnx.helper.make_model(graph, producer_name="fuselage",
                                   opset_imports=[onnx.helper.make_opsetid("", OPSET)])
    proto.ir_version = IR_VERSION
    try:
        onnx.checker.check_model(proto, full_check=True)  # shape inference too
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as e:
        raise OnnxExportError(f"to_onnx: internal error, the ONNX model it built does not "
                              f"pass onnx.checker: {e}") from e
    return proto


def to_onnx(model, path, example_inputs=None):
    """Writes `model` to `path` as ONNX (opset 17): a float model as plain ONNX, a
    reference or lowered quantized model as QDQ (QuantizeLinear / DequantizeLinear around
    float ops, int8 weights per channel, int32 biases), which ONNX Runtime fuses into its
    quantized ops (QLinearConv, QLinearAdd, ...).

    `model`: a fuselage model file's path, a fuselage._core.Model, or a
    torch.fx.GraphModule (what fuselage.to_torch and fuselage.quantize_fx return; an
    nn.Module is traced as fuselage.export traces it). `example_inputs`: a tuple of
    tensors the model is run on once (the ONNX graph's shapes are theirs; shape
    arithmetic becomes constants); None takes the input shapes the model file recorded.
    Returns `path`. Raises OnnxExportError naming the node (or the path), and then writes
    nothing; an existing file is replaced only by a complete new one."""
    from fuselage import _exporter

    proto = build(model, example_inputs)
    try:
        data = proto.SerializeToString()
    except ValueError as e:  # protobuf's 2 GB limit
        raise OnnxExportError(f"to_onnx: the model does not fit one ONNX file: {e}") from e
    try:
        _exporter._write_atomically(path, data)
    except ExportError as e:
        raise OnnxExportError(f"to_onnx: {e}") from None
    return path
