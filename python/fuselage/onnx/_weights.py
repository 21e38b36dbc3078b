"""Weights and biases of convs and linears as ONNX initializers.

A quantized weight (nnq / nniq modules keep it packed, nnqr reference modules as a float
weight with its quantization parameters) is written as its integers, an int8 initializer,
read through a DequantizeLinear: per output channel along axis 0 (axis 1 for a transposed
conv's [in, out, ...] weight), which ONNX allows from opset 13. A bias whose op reads a
quantized input and a quantized weight is written as ONNX Runtime's QLinearConv / QGemm
take it: int32, with scale input_scale * weight_scale (per channel) and zero point 0,
through a DequantizeLinear. Otherwise weights and biases are float initializers.
"""

import numpy as np
import torch

from fuselage.errors import OnnxExportError
from fuselage.onnx._graph import INT32, INT8, UINT8, NUMPY_TYPE

_ELEM_TYPE = {torch.qint8: INT8, torch.quint8: UINT8}
_INT32 = np.iinfo(np.int32)


def weight_and_bias(module):
    """(weight, bias) of a conv or linear module of any form: the weight a quantized
    torch tensor for nnq / nniq / nnqr modules, float for nn modules; the bias float or
    None."""
    weight = getattr(module, "weight")
    if callable(weight):  # nnq / nniq: packed, unpacked by the methods
        return weight(), module.bias()
    if hasattr(module, "get_quantized_weight"):  # nnqr: the reference module's own qparams
        return module.get_quantized_weight(), module.bias
    return weight, module.bias


def _channel_qparams(weight):
    """(scales, zero points, axis) of a quantized weight; axis None when per tensor."""
    if weight.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric,
                            torch.per_channel_affine_float_qparams):
        return (weight.q_per_channel_scales().numpy(),
                weight.q_per_channel_zero_points().numpy(), weight.q_per_channel_axis())
    return np.float64(weight.q_scale()), np.int64(weight.q_zero_point()), None


def emit_weight(g, weight, base, where):
    """The float ONNX tensor an op reads for `weight`, and the scales of its quantization
    (float32: one per channel, or one for the tensor; None for a float weight)."""
    weight = weight.detach()
    if not weight.is_quantized:
        return g.constant(weight.float().numpy(), base), None
    elem_type = _ELEM_TYPE.get(weight.dtype)
    if elem_type is None:
        raise OnnxExportError(f"{where}: its weight is {weight.dtype}; ONNX QDQ takes "
                              "torch.qint8 or torch.quint8 weights")
    scales, zero_points, weight_axis = _channel_qparams(weight)
    integers = g.constant(weight.int_repr().numpy(), base + "_quantized")
    attributes = {} if weight_axis is None else {"axis": int(weight_axis)}
    s, z = g.qparams(scales, zero_points, elem_type, axis=weight_axis)
    name = g.node("DequantizeLinear", [integers, s, z], base, **attributes)
    return name, np.atleast_1d(np.asarray(scales, dtype=np.float32))


def emit_bias(g, bias, input_source, weight_scales, base):
    """The float ONNX tensor an op reads for `bias`: int32 through a DequantizeLinear when
    both the input (input_source, a Quantized) and the weight are quantized. The scale is
    float32(input_scale) * float32(weight_scale), the product ONNX Runtime's QLinearConv
    assumes when it takes the int32 values as they are. A value beyond int32 saturates."""
    bias = bias.detach().float().numpy()
    if weight_scales is not None and weight_scales.size == 1:
        weight_scales = np.full(bias.shape, weight_scales[0], dtype=np.float32)
    if input_source is None or weight_scales is None or weight_scales.shape != bias.shape:
        return g.constant(bias, base)
    scales = np.float32(input_source.scale) * weight_scales
    integers = np.clip(np.rint(bias.astype(np.float64) / scales.astype(np.float64)),
                       _INT32.min, _INT32.max).astype(np.int32)
    s, z = g.qparams(scales, np.zeros(len(scales), NUMPY_TYPE[INT32]), INT32, axis=0)
    return g.node("DequantizeLinear", [g.constant(integers, base + "_quantized"), s, z], base,
                  axis=0)
