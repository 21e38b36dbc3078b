"""The ONNX graph fuselage.to_onnx builds, and the values its tensors carry.

A value of the torch.fx graph is one of three kinds, as the tensor it holds when the model
runs:
  - Float: a float (or integer) tensor, named by one ONNX tensor;
  - Quantized: a quantized tensor, named by one integer ONNX tensor (uint8 / int8) and its
    own scale and zero point;
  - Dequantized: what `x.dequantize()` returns, a float view of a Quantized value. It has
    no ONNX tensor of its own: each op reading it gets its own DequantizeLinear, because
    ONNX Runtime's QDQ selectors take a group only if its DequantizeLinear nodes feed
    that group alone.
A Quantized value read by a float op gets a DequantizeLinear of its own the same way.
"""

import dataclasses

import numpy as np

# ONNX's tensor element types (onnx.TensorProto), so this module needs no onnx import.
FLOAT, UINT8, INT8, INT32, INT64, BOOL = 1, 2, 3, 6, 7, 9

NUMPY_TYPE = {FLOAT: np.float32, UINT8: np.uint8, INT8: np.int8, INT32: np.int32,
              INT64: np.int64, BOOL: np.bool_}
INTEGER_RANGE = {UINT8: (0, 255), INT8: (-128, 127)}


@dataclasses.dataclass(frozen=True)
class Float:
    name: str


@dataclasses.dataclass(frozen=True)
class Quantized:
    name: str
    scale: float
    zero_point: int
    elem_type: int  # UINT8 or INT8


@dataclasses.dataclass(frozen=True)
class Dequantized:
    source: Quantized


class Graph:
    """ONNX nodes, initializers, inputs and outputs under construction, with names that
    are unique (an fx node's name where it is free, so the ONNX graph reads like the
    fx code)."""

    def __init__(self):
        self.nodes = []         # onnx NodeProto
        self.initializers = []  # onnx TensorProto
        self.inputs = []        # onnx ValueInfoProto
        self.outputs = []       # onnx ValueInfoProto
        self._used = set()
        self._constants = {}    # (bytes, dtype, shape) -> initializer name
        self.small = {}         # name -> array, of the initializers of <= 16 elements

    def fresh(self, base):
        name, i = base, 0
        while name in self._used:
            i += 1
            name = f"{base}_{i}"
        self._used.add(name)
        return name

    def node(self, op_type, inputs, base, **attributes):
        """Appends one node; returns the name of its (only) output."""
        import onnx.helper

        output = self.fresh(base)
        self.nodes.append(onnx.helper.make_node(op_type, list(inputs), [output],
                                                name=output, **attributes))
        return output

    def multi_node(self, op_type, inputs, base, count, **attributes):
        """Appends one node of `count` outputs; returns their names."""
        import onnx.helper

        outputs = [self.fresh(f"{base}_{i}") for i in range(count)]
        self.nodes.append(onnx.helper.make_node(op_type, list(inputs), outputs,
                                                name=outputs[0], **attributes))
        return outputs

    def constant(self, array, base):
        """An initializer holding `array` (a numpy array); equal small constants (scales,
        zero points, shapes) are shared."""
        import onnx.numpy_helper

        array = np.asarray(array)
        key = None
        if array.size <= 16:
            key = (array.tobytes(), array.dtype.str, array.shape)
            if key in self._constants:
                return self._constants[key]
        name = self.fresh(base)
        self.initializers.append(onnx.numpy_helper.from_array(array, name))
        if key is not None:
            self._constants[key] = name
            self.small[name] = array
        return name

    def drop_unread_initializers(self):
        read = {name for node in self.nodes for name in node.input}
        read |= {o.name for o in self.outputs}
        self.initializers = [t for t in self.initializers if t.name in read]

    # ---- quantize / dequantize -----------------------------------------------------------

    def qparams(self, scale, zero_point, elem_type, axis=None):
        """Initializer names of a scale (float32) and zero point (of elem_type): scalars,
        or one per channel when `axis` is given (scale / zero_point are then sequences)."""
        scales = np.asarray(scale, dtype=np.float32)
        zero_points = np.asarray(zero_point, dtype=NUMPY_TYPE[elem_type])
        if axis is None:
            scales, zero_points = scales.reshape(()), zero_points.reshape(())
        return self.constant(scales, "scale"), self.constant(zero_points, "zero_point")

    def quantize(self, float_name, scale, zero_point, elem_type, base):
        s, z = self.qparams(scale, zero_point, elem_type)
        name = self.node("QuantizeLinear", [float_name, s, z], base)
        return Quantized(name, float(scale), int(zero_point), elem_type)

    def dequantize(self, value, base):
        s, z = self.qparams(value.scale, value.zero_point, value.elem_type)
        return self.node("DequantizeLinear", [value.name, s, z], base)

    def exact_scalar(self, value, elem_type, base):
        """A DequantizeLinear giving back `value` (as float32) exactly: the integer 1 (or,
        below zero, -1 as int8 or 0 with zero point 1 as uint8) with scale |value|."""
        value = np.float32(value)
        if value == 0:
            q, zero_point, scale = 0, 0, np.float32(1)
        elif value > 0:
            q, zero_point, scale = 1, 0, value
        elif elem_type == INT8:
            q, zero_point, scale = -1, 0, -value
        else:
            q, zero_point, scale = 0, 1, -value
        s, z = self.qparams(scale, zero_point, elem_type)
        integer = self.constant(np.asarray(q, dtype=NUMPY_TYPE[elem_type]), "scalar")
        return self.node("DequantizeLinear", [integer, s, z], base + "_dq")

    def float_input(self, value, base):
        """The ONNX tensor an op that computes in float reads for `value`: the value's own
        for a Float, a DequantizeLinear made for this reader otherwise."""
        if isinstance(value, Float):
            return value.name
        if isinstance(value, Dequantized):
            value = value.source
        return self.dequantize(value, base + "_dq")
