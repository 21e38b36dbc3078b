"""Each torch op fuselage's graphs hold, as ONNX nodes computing it in float.

One table per node kind, keyed as fuselage names things (graph/NAMING.md): module type
names (`nn.Conv2d`, `nniq.ConvReLU2d`, `nnqr.Linear`), call_function names
(`torch.flatten`, `torch.ops.quantized.add_relu`) and call_method names (`view`). An
emitter's parameters are the torch op's own, so Python binds the node's args and kwargs as
torch would; it receives resolved values (fuselage.onnx._graph's Float / Quantized /
Dequantized for tensors, plain Python values otherwise) and returns either the name of the
float ONNX tensor it computed, or a value (for ops that only pass a value on).

A quantized op is written as what it means: its quantized inputs dequantized, the float op,
its output quantized (the export adds the QuantizeLinear with the scale and zero point the
output had on the example run). That is the QDQ form ONNX Runtime's selectors fuse into
QLinearConv, QLinearAdd, ...; quantized weights and int32 biases come from
fuselage.onnx._weights.
"""

import math

import numpy as np
import torch

from fuselage.errors import OnnxExportError
from fuselage.onnx import _weights
from fuselage.onnx._graph import INTEGER_RANGE, Dequantized, Float, Quantized

MODULES, FUNCTIONS, METHODS = {}, {}, {}


def _register(table, names):
    def register(fn):
        for name in names:
            table[name] = fn
        return fn
    return register


def module(*names):
    return _register(MODULES, names)


def function(*names):
    return _register(FUNCTIONS, names)


def method(*names):
    return _register(METHODS, names)


def _tuple(value, n):
    return tuple(value) if isinstance(value, (tuple, list)) else (value,) * n


def _rank(cx, value):
    return len(cx.shape_of(value))


# ---- pass-through -------------------------------------------------------------------------

@module("nn.Identity", "nn.Dropout", "nn.Dropout1d", "nn.Dropout2d", "nn.Dropout3d",
        "nnq.Dropout", "torch.ao.quantization.QuantStub", "torch.ao.quantization.DeQuantStub")
def _identity_module(cx, node, mod, input, *args, **kwargs):
    if type(mod).__name__ == "DeQuantStub" and not isinstance(input, Float):
        return Dequantized(cx.quantized_source(input))
    return input


@function("torch.nn.functional.dropout", "torch.ops.quantized.dropout")
def _dropout(cx, node, input, *args, **kwargs):
    return input


@method("contiguous", "detach", "clone")
def _alias(cx, node, self, *args, **kwargs):
    return self


@function("torchvision.ops.stochastic_depth.stochastic_depth")
def _stochastic_depth(cx, node, input, p, mode, training=True):
    if training and p > 0:
        raise OnnxExportError(f"{cx.where(node)}: stochastic depth in training mode (random) "
                              "has no inference form")
    return input


@function("operator.getitem")
def _getitem(cx, node, container, index):
    # One result of a multi-output op (chunk, split); indexing a tensor is not mapped.
    if isinstance(container, (tuple, list)):
        return container[index]
    raise OnnxExportError(f"{cx.where(node)}: indexing a tensor has no ONNX mapping here")


# ---- quantize / dequantize ----------------------------------------------------------------

@function("torch.quantize_per_tensor")
def _quantize_per_tensor(cx, node, input, scale, zero_point, dtype):
    return cx.quantize(cx.f(input, node.name), node)


@module("nnq.Quantize")
def _quantize_module(cx, node, mod, input):
    return cx.quantize(cx.f(input, node.name), node)


@function("torch.dequantize")
@method("dequantize")
def _dequantize(cx, node, input):
    return Dequantized(cx.quantized_source(input, node))


@module("nnq.DeQuantize")
def _dequantize_module(cx, node, mod, input):
    return Dequantized(cx.quantized_source(input, node))


# ---- convolution and linear ---------------------------------------------------------------

def _conv_pads(conv, nd, where):
    padding = conv.padding
    if isinstance(padding, str):
        if padding == "valid":
            return [0] * (2 * nd)
        if padding == "same":  # PyTorch puts the odd pixel at the end, as SAME_UPPER does
            total = [d * (k - 1) for d, k in zip(_tuple(conv.dilation, nd),
                                                 _tuple(conv.kernel_size, nd))]
            return [t // 2 for t in total] + [t - t // 2 for t in total]
        raise OnnxExportError(f"{where}: padding '{padding}' has no ONNX form")
    padding = _tuple(padding, nd)
    return list(padding) * 2


def _conv_attributes(conv, nd, where):
    if getattr(conv, "padding_mode", "zeros") != "zeros":
        raise OnnxExportError(f"{where}: padding_mode '{conv.padding_mode}' has no ONNX Conv "
                              "form (only 'zeros')")
    attributes = dict(kernel_shape=list(_tuple(conv.kernel_size, nd)),
                      strides=list(_tuple(conv.stride, nd)),
                      dilations=list(_tuple(conv.dilation, nd)),
                      pads=_conv_pads(conv, nd, where), group=int(conv.groups))
    if getattr(conv, "transposed", False):
        attributes["output_padding"] = list(_tuple(conv.output_padding, nd))
    return attributes


def conv(cx, node, conv_module, input, base=None):
    """The float ONNX Conv (or ConvTranspose) of a conv module of any form (nn, nnqr,
    nnq / nniq): its weight and bias from fuselage.onnx._weights, quantized (an int8
    weight, an int32 bias) when the module's weight is."""
    base = base or node.name
    where = cx.where(node)
    weight, bias = _weights.weight_and_bias(conv_module)
    nd = weight.dim() - 2
    transposed = getattr(conv_module, "transposed", False)
    x = cx.f(input, base)
    w_name, w_scales = _weights.emit_weight(cx.g, weight, base + "_weight", where)
    inputs = [x, w_name]
    if bias is not None:
        inputs.append(_weights.emit_bias(cx.g, bias, cx.quantized_source(input), w_scales,
                                         base + "_bias"))
    return cx.g.node("ConvTranspose" if transposed else "Conv", inputs, base,
                     **_conv_attributes(conv_module, nd, where))


def linear(cx, node, linear_module, input, base=None):
    """The float ONNX Gemm of a linear module of any form; an input of another rank than
    2 is a MatMul and an Add (which ONNX Runtime does not fuse into a quantized op)."""
    base = base or node.name
    weight, bias = _weights.weight_and_bias(linear_module)
    x = cx.f(input, base)
    w_name, w_scales = _weights.emit_weight(cx.g, weight, base + "_weight", cx.where(node))
    if _rank(cx, input) == 2:
        inputs = [x, w_name]
        if bias is not None:
            inputs.append(_weights.emit_bias(cx.g, bias, cx.quantized_source(input), w_scales,
                                             base + "_bias"))
        return cx.g.node("Gemm", inputs, base, transB=1)
    transposed = cx.g.node("Transpose", [w_name], base + "_weight_t", perm=[1, 0])
    out = cx.g.node("MatMul", [x, transposed], base + "_matmul" if bias is not None else base)
    if bias is None:
        return out
    return cx.g.node("Add", [out, cx.g.constant(bias.detach().numpy().astype(np.float32),
                                                base + "_bias")], base)


@module("nn.Conv1d", "nn.Conv2d", "nn.Conv3d", "nn.ConvTranspose1d", "nn.ConvTranspose2d",
        "nn.ConvTranspose3d", "nnqr.Conv1d", "nnqr.Conv2d", "nnqr.Conv3d",
        "nnq.Conv1d", "nnq.Conv2d", "nnq.Conv3d")
def _conv_module(cx, node, mod, input):
    return conv(cx, node, mod, input)


@module("nniq.ConvReLU1d", "nniq.ConvReLU2d", "nniq.ConvReLU3d")
def _conv_relu_module(cx, node, mod, input):
    return cx.g.node("Relu", [conv(cx, node, mod, input, node.name + "_conv")], node.name)


@module("nn.Linear", "nnqr.Linear", "nnq.Linear")
def _linear_module(cx, node, mod, input):
    return linear(cx, node, mod, input)


@module("nniq.LinearReLU")
def _linear_relu_module(cx, node, mod, input):
    return cx.g.node("Relu", [linear(cx, node, mod, input, node.name + "_linear")], node.name)


@module("nni.ConvReLU1d", "nni.ConvReLU2d", "nni.ConvReLU3d", "nni.ConvBn1d", "nni.ConvBn2d",
        "nni.ConvBn3d", "nni.ConvBnReLU1d", "nni.ConvBnReLU2d", "nni.ConvBnReLU3d",
        "nni.LinearReLU", "nni.BNReLU2d", "nni.BNReLU3d", "nni.ConvAct2d")
def _sequential_fused(cx, node, mod, input):
    """A fused float or reference module: its children in order (conv, bn, relu...)."""
    value = input
    children = list(mod.children())
    for i, child in enumerate(children):
        base = node.name if i == len(children) - 1 else f"{node.name}_{i}"
        emit = cx.module_emitter(child, node)
        value = emit(cx, _Renamed(node, base), child, value)
        if isinstance(value, str):
            value = Float(value)
    return value.name


class _Renamed:
    """A node seen under another name, so a fused module's parts get names of their own."""

    def __init__(self, node, name):
        self._node, self.name = node, name

    def __getattr__(self, attribute):
        return getattr(self._node, attribute)


@module("nni.ConvAdd2d", "nni.ConvAddReLU2d", "nniq.ConvAdd2d", "nniq.ConvAddReLU2d")
def _conv_add(cx, node, mod, input, extra):
    """conv(input) + extra (then relu): fuselage's fused residual, both inputs quantized
    in its quantized form. ONNX Runtime has no conv-add kernel, so the conv's result is
    quantized on its own (conv_add_mid_qparams says with what) to make QLinearConv, and the
    add reads it and `extra` dequantized to make QLinearAdd."""
    quantized = type(mod).__module__.startswith("fuselage.nn.quantized")
    conv_part = mod if quantized else mod[0]
    relu = type(mod).__name__.endswith("ReLU2d")
    y = conv(cx, node, conv_part, input, node.name + "_conv")
    out = cx.output_qparams(node)
    x_source, e_source = cx.quantized_source(input), cx.quantized_source(extra)
    if out is not None and x_source is not None and e_source is not None:
        mid = conv_add_mid_qparams(out, e_source)
        y = cx.g.dequantize(cx.g.quantize(y, *mid, base=node.name + "_conv_q"),
                            node.name + "_conv_dq")
    total = cx.g.node("Add", [y, cx.f(extra, node.name + "_extra")],
                      node.name + "_add" if relu else node.name)
    return cx.g.node("Relu", [total], node.name) if relu else total


def conv_add_mid_qparams(out, extra):
    """The scale and zero point the conv's result of a quantized conv-add(-relu) is
    quantized with: they cover [out_lo - extra_hi, out_hi - extra_lo], out_* and extra_*
    the float ranges the output and the extra input can represent. A conv value outside
    that range gives an output the output's quantization clamps anyway (below it, the sum
    is below out_lo even with the largest extra; above it, above out_hi), so no result
    fuselage's kernel gives is cut; what the extra step costs is its rounding, at most
    half of (out_scale + extra_scale). `out` is (scale, zero_point, elem_type)."""
    out_scale, out_zp, elem_type = out
    qmin, qmax = INTEGER_RANGE[elem_type]
    emin, emax = INTEGER_RANGE[extra.elem_type]
    out_lo, out_hi = (qmin - out_zp) * out_scale, (qmax - out_zp) * out_scale
    e_lo, e_hi = (emin - extra.zero_point) * extra.scale, (emax - extra.zero_point) * extra.scale
    lo, hi = min(0.0, out_lo - e_hi), max(0.0, out_hi - e_lo)
    # One level spare, and the zero point rounded up: the grid then reaches both ends,
    # (qmin - zp) * scale <= lo and (qmax - zp) * scale >= hi.
    scale = (hi - lo) / (qmax - qmin - 1)
    zero_point = int(min(qmax, max(qmin, math.ceil(qmin - lo / scale))))
    return scale, zero_point, elem_type


# ---- normalization ------------------------------------------------------------------------

def _batch_norm(cx, node, input, mod, base):
    c = mod.num_features
    weight = mod.weight if mod.weight is not None else torch.ones(c)
    bias = mod.bias if mod.bias is not None else torch.zeros(c)
    const = lambda t, what: cx.g.constant(t.detach().float().numpy(), f"{base}_{what}")  # noqa
    return cx.g.node("BatchNormalization",
                     [cx.f(input, base), const(weight, "weight"), const(bias, "bias"),
                      const(mod.running_mean, "mean"), const(mod.running_var, "var")],
                     base, epsilon=float(mod.eps))


@module("nn.BatchNorm1d", "nn.BatchNorm2d", "nn.BatchNorm3d", "nnq.BatchNorm2d",
        "nnq.BatchNorm3d")
def _batch_norm_module(cx, node, mod, input):
    if mod.running_mean is None:
        raise OnnxExportError(f"{cx.where(node)}: a batch norm without running statistics "
                              "(track_running_stats=False) has no inference form")
    return _batch_norm(cx, node, input, mod, node.name)


@module("nniq.BNReLU2d", "nniq.BNReLU3d")
def _bn_relu_module(cx, node, mod, input):
    return cx.g.node("Relu", [_batch_norm(cx, node, input, mod, node.name + "_bn")], node.name)


def _layer_norm(cx, node, input, normalized_shape, weight, bias, eps):
    """weight / bias: None, a torch tensor (a module's), or a Float (a get_attr's)."""
    shape = tuple(_tuple(normalized_shape, 1))

    def operand(value, fill, what):
        if isinstance(value, Float):
            return value.name
        value = fill(shape) if value is None else value
        return cx.g.constant(value.detach().float().numpy(), f"{node.name}_{what}")

    return cx.g.node("LayerNormalization",
                     [cx.f(input, node.name), operand(weight, torch.ones, "weight"),
                      operand(bias, torch.zeros, "bias")],
                     node.name, axis=-len(shape), epsilon=float(eps))


@module("nn.LayerNorm")
def _layer_norm_module(cx, node, mod, input):
    return _layer_norm(cx, node, input, mod.normalized_shape, mod.weight, mod.bias, mod.eps)


@function("torch.nn.functional.layer_norm")
def _layer_norm_function(cx, node, input, normalized_shape, weight=None, bias=None,
                         eps=1e-5):
    return _layer_norm(cx, node, input, normalized_shape, weight, bias, eps)


# ---- activations --------------------------------------------------------------------------

def _unary(op_type, **attributes):
    def emit(cx, node, input, *args, **kwargs):
        return cx.g.node(op_type, [cx.f(input, node.name)], node.name, **attributes)
    return emit


def _unary_module(op_type):
    def emit(cx, node, mod, input):
        return cx.g.node(op_type, [cx.f(input, node.name)], node.name)
    return emit


for _op, _mods, _functions, _methods in (
        ("Relu", ["nn.ReLU"], ["torch.relu", "torch.nn.functional.relu"], ["relu"]),
        ("Sigmoid", ["nn.Sigmoid", "nnq.Sigmoid"],
         ["torch.sigmoid", "torch.nn.functional.sigmoid"], ["sigmoid"]),
        ("Tanh", ["nn.Tanh"], ["torch.tanh", "torch.nn.functional.tanh"], ["tanh"]),
        ("HardSwish", ["nn.Hardswish", "nnq.Hardswish"], ["torch.nn.functional.hardswish"],
         []),
):
    module(*_mods)(_unary_module(_op))
    function(*_functions)(_unary(_op))
    method(*_methods)(_unary(_op))


@function("torch.ops.quantized.sigmoid")
def _quantized_sigmoid(cx, node, qx, output_scale, output_zero_point):
    return cx.g.node("Sigmoid", [cx.f(qx, node.name)], node.name)


@function("torch.ops.quantized.hardswish")
def _quantized_hardswish(cx, node, input, output_scale, output_zero_point):
    return cx.g.node("HardSwish", [cx.f(input, node.name)], node.name)


def clip(cx, node, input, lo, hi):
    return cx.g.node("Clip", [cx.f(input, node.name), cx.g.constant(np.float32(lo), "min"),
                              cx.g.constant(np.float32(hi), "max")], node.name)


@module("nn.ReLU6", "nnq.ReLU6")
def _relu6_module(cx, node, mod, input):
    return clip(cx, node, input, 0.0, 6.0)


@function("torch.nn.functional.relu6")
def _relu6(cx, node, input, inplace=False):
    return clip(cx, node, input, 0.0, 6.0)


@module("nn.Hardtanh")
def _hardtanh_module(cx, node, mod, input):
    return clip(cx, node, input, mod.min_val, mod.max_val)


@function("torch.nn.functional.hardtanh", "torch.nn.functional.hardtanh_")
def _hardtanh(cx, node, input, min_val=-1.0, max_val=1.0, inplace=False):
    return clip(cx, node, input, min_val, max_val)


@function("torch.clamp")
@method("clamp")
def _clamp(cx, node, input, min=None, max=None):
    lo = -math.inf if min is None else min
    hi = math.inf if max is None else max
    if not all(isinstance(v, (int, float)) for v in (lo, hi)):
        raise OnnxExportError(f"{cx.where(node)}: min / max must be numbers")
    return clip(cx, node, input, lo, hi)


@module("nn.Hardsigmoid")
def _hardsigmoid_module(cx, node, mod, input):
    return cx.g.node("HardSigmoid", [cx.f(input, node.name)], node.name, alpha=1.0 / 6,
                     beta=0.5)


@function("torch.nn.functional.hardsigmoid")
def _hardsigmoid(cx, node, input, inplace=False):
    return cx.g.node("HardSigmoid", [cx.f(input, node.name)], node.name, alpha=1.0 / 6,
                     beta=0.5)


def _silu(cx, node, input):
    x = cx.f(input, node.name)
    return cx.g.node("Mul", [x, cx.g.node("Sigmoid", [x], node.name + "_sigmoid")], node.name)


@module("nn.SiLU")
def _silu_module(cx, node, mod, input):
    return _silu(cx, node, input)


@function("torch.nn.functional.silu")
def _silu_function(cx, node, input, inplace=False):
    return _silu(cx, node, input)


def _gelu(cx, node, input, approximate):
    # ONNX's Gelu is opset 20; written out as PyTorch defines it.
    x = cx.f(input, node.name)
    c = lambda v, what: cx.g.constant(np.float32(v), what)  # noqa: E731
    if approximate == "tanh":
        cube = cx.g.node("Mul", [x, cx.g.node("Mul", [x, x], node.name + "_sq")],
                         node.name + "_cube")
        inner = cx.g.node("Add", [x, cx.g.node("Mul", [cube, c(0.044715, "k")],
                                               node.name + "_k")], node.name + "_inner")
        t = cx.g.node("Tanh", [cx.g.node("Mul", [inner, c(math.sqrt(2 / math.pi), "k")],
                                         node.name + "_scaled")], node.name + "_tanh")
    elif approximate == "none":
        t = cx.g.node("Erf", [cx.g.node("Mul", [x, c(1 / math.sqrt(2), "k")],
                                        node.name + "_scaled")], node.name + "_erf")
    else:
        raise OnnxExportError(f"{cx.where(node)}: approximate='{approximate}' is not a GELU "
                              "form ('none' or 'tanh')")
    half = cx.g.node("Mul", [x, c(0.5, "half")], node.name + "_half")
    return cx.g.node("Mul", [half, cx.g.node("Add", [t, c(1.0, "one")], node.name + "_1p")],
                     node.name)


@module("nn.GELU")
def _gelu_module(cx, node, mod, input):
    return _gelu(cx, node, input, mod.approximate)


@function("torch.nn.functional.gelu")
def _gelu_function(cx, node, input, approximate="none"):
    return _gelu(cx, node, input, approximate)


@module("nn.LeakyReLU", "nnq.LeakyReLU")
def _leaky_relu_module(cx, node, mod, input):
    return cx.g.node("LeakyRelu", [cx.f(input, node.name)], node.name,
                     alpha=float(mod.negative_slope))


@function("torch.nn.functional.leaky_relu")
def _leaky_relu(cx, node, input, negative_slope=0.01, inplace=False):
    return cx.g.node("LeakyRelu", [cx.f(input, node.name)], node.name,
                     alpha=float(negative_slope))


@function("torch.ops.quantized.leaky_relu")
def _quantized_leaky_relu(cx, node, qx, negative_slope, inplace, output_scale,
                          output_zero_point):
    return _leaky_relu(cx, node, qx, negative_slope)


@module("nn.ELU", "nnq.ELU")
def _elu_module(cx, node, mod, input):
    return cx.g.node("Elu", [cx.f(input, node.name)], node.name, alpha=float(mod.alpha))


@function("torch.nn.functional.elu")
def _elu(cx, node, input, alpha=1.0, inplace=False):
    return cx.g.node("Elu", [cx.f(input, node.name)], node.name, alpha=float(alpha))


def _softmax(cx, node, input, dim):
    if dim is None:
        raise OnnxExportError(f"{cx.where(node)}: softmax needs an explicit dim")
    return cx.g.node("Softmax", [cx.f(input, node.name)], node.name, axis=int(dim))


@module("nn.Softmax", "nnq.Softmax")
def _softmax_module(cx, node, mod, input):
    return _softmax(cx, node, input, mod.dim)


@function("torch.softmax", "torch.nn.functional.softmax")
@method("softmax")
def _softmax_function(cx, node, input, dim=None, _stacklevel=3, dtype=None):
    return _softmax(cx, node, input, dim)


@function("torch.ops.quantized.softmax")
def _quantized_softmax(cx, node, qx, dim, output_scale, output_zero_point):
    return _softmax(cx, node, qx, dim)


# ---- pooling ------------------------------------------------------------------------------

def _pool_attributes(cx, node, input, kernel_size, stride, padding, ceil_mode, dilation=1):
    nd = _rank(cx, input) - 2
    kernel = _tuple(kernel_size, nd)
    stride = kernel if stride is None or stride == [] or stride == () else _tuple(stride, nd)
    padding, dilation = _tuple(padding, nd), _tuple(dilation, nd)
    if ceil_mode:
        # PyTorch drops a last window that would start in the padding; ONNX keeps it.
        spatial, wanted = cx.shape_of(input)[2:], cx.recorded_shape(node)[2:]
        onnx_sizes = [-(-(n + 2 * p - d * (k - 1) - 1) // s) + 1
                      for n, p, d, k, s in zip(spatial, padding, dilation, kernel, stride)]
        if list(onnx_sizes) != list(wanted):
            raise OnnxExportError(
                f"{cx.where(node)}: ceil_mode gives {list(wanted)} in PyTorch, which drops "
                f"a last window that starts in the padding, and {onnx_sizes} in ONNX")
    return nd, dict(kernel_shape=list(kernel), strides=list(stride), pads=list(padding) * 2,
                    ceil_mode=int(bool(ceil_mode)))


def _max_pool(cx, node, input, kernel_size, stride=None, padding=0, dilation=1,
              ceil_mode=False, return_indices=False):
    if return_indices:
        raise OnnxExportError(f"{cx.where(node)}: return_indices=True is not exported")
    nd, attributes = _pool_attributes(cx, node, input, kernel_size, stride, padding, ceil_mode,
                                      dilation)
    return cx.g.node("MaxPool", [cx.f(input, node.name)], node.name,
                     dilations=list(_tuple(dilation, nd)), **attributes)


@module("nn.MaxPool1d", "nn.MaxPool2d", "nn.MaxPool3d", "nnq.MaxPool2d")
def _max_pool_module(cx, node, mod, input):
    return _max_pool(cx, node, input, mod.kernel_size, mod.stride, mod.padding, mod.dilation,
                     mod.ceil_mode, mod.return_indices)


function("torch.nn.functional.max_pool1d", "torch.nn.functional.max_pool2d",
         "torch.nn.functional.max_pool3d")(_max_pool)


def _avg_pool(cx, node, input, kernel_size, stride=None, padding=0, ceil_mode=False,
              count_include_pad=True, divisor_override=None):
    if divisor_override is not None:
        raise OnnxExportError(f"{cx.where(node)}: divisor_override has no ONNX AveragePool form")
    _, attributes = _pool_attributes(cx, node, input, kernel_size, stride, padding, ceil_mode)
    return cx.g.node("AveragePool", [cx.f(input, node.name)], node.name,
                     count_include_pad=int(bool(count_include_pad)), **attributes)


@module("nn.AvgPool1d", "nn.AvgPool2d", "nn.AvgPool3d")
def _avg_pool_module(cx, node, mod, input):
    return _avg_pool(cx, node, input, mod.kernel_size, mod.stride, mod.padding, mod.ceil_mode,
                     mod.count_include_pad, getattr(mod, "divisor_override", None))


function("torch.nn.functional.avg_pool1d", "torch.nn.functional.avg_pool2d",
         "torch.nn.functional.avg_pool3d")(_avg_pool)


def _adaptive_avg_pool(cx, node, input, output_size):
    spatial = cx.shape_of(input)[2:]
    wanted = [s if o is None else o for s, o in zip(spatial, _tuple(output_size, len(spatial)))]
    if all(o == 1 for o in wanted):
        return cx.g.node("GlobalAveragePool", [cx.f(input, node.name)], node.name)
    if any(s % o for s, o in zip(spatial, wanted)):
        raise OnnxExportError(
            f"{cx.where(node)}: adaptive average pooling from {list(spatial)} to {wanted} "
            "has uneven windows, which no ONNX pool computes")
    kernel = [s // o for s, o in zip(spatial, wanted)]
    return cx.g.node("AveragePool", [cx.f(input, node.name)], node.name, kernel_shape=kernel,
                     strides=kernel)


@module("nn.AdaptiveAvgPool1d", "nn.AdaptiveAvgPool2d", "nn.AdaptiveAvgPool3d")
def _adaptive_avg_pool_module(cx, node, mod, input):
    return _adaptive_avg_pool(cx, node, input, mod.output_size)


function("torch.nn.functional.adaptive_avg_pool1d", "torch.nn.functional.adaptive_avg_pool2d",
         "torch.nn.functional.adaptive_avg_pool3d")(_adaptive_avg_pool)


@function("torch.mean")
@method("mean")
def _mean(cx, node, input, dim=None, keepdim=False, dtype=None):
    rank = _rank(cx, input)
    dims = list(range(rank)) if dim is None else [d % rank for d in _tuple(dim, 1)]
    if rank >= 3 and sorted(dims) == list(range(2, rank)):
        # The mean over all spatial dims is a global average pool, which ONNX Runtime
        # runs quantized (QLinearGlobalAveragePool); ReduceMean it does not.
        pooled = cx.g.node("GlobalAveragePool", [cx.f(input, node.name)],
                           node.name if keepdim else node.name + "_pool")
        return pooled if keepdim else cx.reshape(pooled, node, node.name)
    return cx.g.node("ReduceMean", [cx.f(input, node.name)], node.name, axes=dims,
                     keepdims=int(bool(keepdim)))


# ---- arithmetic ---------------------------------------------------------------------------

def _operand(cx, node, value, base, quantized_like=None):
    """The ONNX tensor of one operand of a binary op: a tensor's, or a number's as a
    constant. With `quantized_like` (a Quantized), a number is written quantized, through
    a DequantizeLinear that gives it back exactly, so that DQ, DQ -> Add / Mul -> Q is the
    group ONNX Runtime's selector takes (it wants every input dequantized)."""
    if isinstance(value, (Float, Quantized, Dequantized)):
        return cx.f(value, base)
    if isinstance(value, (bool, int, float)):
        if quantized_like is not None:
            return cx.g.exact_scalar(float(value), quantized_like.elem_type, base)
        return cx.g.constant(np.asarray(value, dtype=cx.numpy_dtype(node)), "const")
    raise OnnxExportError(f"{cx.where(node)}: an operand is a {type(value).__name__}; "
                          "expected a tensor or a number")


def _binary(op_type):
    def emit(cx, node, input, other, *, alpha=1):
        # A quantized tensor and a number, the result quantized: the number goes in as a
        # quantized tensor too (Add and Mul have ORT QLinear forms; Sub and Div do not).
        quantized = [cx.quantized_source(v) for v in (input, other)
                     if isinstance(v, (Quantized, Dequantized))]
        like = quantized[0] if quantized and op_type in ("Add", "Mul") and alpha == 1 and \
            cx.output_qparams(node) is not None else None
        a = _operand(cx, node, input, node.name + "_a", like)
        b = _operand(cx, node, other, node.name + "_b", like)
        if alpha != 1:
            b = cx.g.node("Mul", [b, cx.g.constant(np.asarray(alpha, cx.numpy_dtype(node)),
                                                   "alpha")], node.name + "_alpha")
        return cx.g.node(op_type, [a, b], node.name)
    return emit


for _op, _targets in (("Add", ["operator.add", "torch.add"]),
                      ("Sub", ["operator.sub", "torch.sub"]),
                      ("Mul", ["operator.mul", "torch.mul"]),
                      ("Div", ["operator.truediv", "torch.div"]),
                      ("MatMul", ["operator.matmul", "torch.matmul"])):
    function(*_targets)(_binary(_op))
    method(_op.lower() if _op != "Div" else "div")(_binary(_op))


def _quantized_binary(op_type, relu):
    def emit(cx, node, qa, qb, scale=None, zero_point=None):
        # (qa, number) or (number, qa): ATen's .Scalar forms, which make their own output
        # parameters (the recorded run knows them); the number goes in quantized as in
        # _binary, so ONNX Runtime's QLinear selector takes the group.
        like = next((cx.quantized_source(v) for v in (qa, qb)
                     if isinstance(v, (Quantized, Dequantized))), None)
        out = cx.g.node(op_type, [_operand(cx, node, qa, node.name + "_a", like),
                                  _operand(cx, node, qb, node.name + "_b", like)],
                        node.name + "_" + op_type.lower() if relu else node.name)
        return cx.g.node("Relu", [out], node.name) if relu else out
    return emit


for _op, _name in (("Add", "add"), ("Mul", "mul")):
    function(f"torch.ops.quantized.{_name}")(_quantized_binary(_op, relu=False))
    function(f"torch.ops.quantized.{_name}_relu")(_quantized_binary(_op, relu=True))
function("torch.ops.quantized.matmul")(_quantized_binary("MatMul", relu=False))


def _concat(cx, node, tensors, dim):
    rank = _rank(cx, tensors[0])
    inputs = [cx.f(t, f"{node.name}_{i}") for i, t in enumerate(tensors)]
    return cx.g.node("Concat", inputs, node.name, axis=int(dim) % rank)


@function("torch.cat")
def _cat(cx, node, tensors, dim=0):
    return _concat(cx, node, tensors, dim)


@function("torch.ops.quantized.cat")
def _quantized_cat(cx, node, qx, dim, scale=None, zero_point=None):
    return _concat(cx, node, qx, dim)


# ---- shapes -------------------------------------------------------------------------------

@function("torch.flatten")
@method("flatten")
def _flatten(cx, node, input, start_dim=0, end_dim=-1):
    rank = _rank(cx, input)
    if start_dim % rank == 1 and end_dim % rank == rank - 1:
        return cx.g.node("Flatten", [cx.f(input, node.name)], node.name, axis=1)
    return cx.reshape(cx.f(input, node.name), node, node.name)


@module("nn.Flatten")
def _flatten_module(cx, node, mod, input):
    return _flatten(cx, node, input, mod.start_dim, mod.end_dim)


@function("torch.reshape", "torch.squeeze", "torch.unsqueeze")
@method("view", "reshape", "squeeze", "unsqueeze")
def _reshape(cx, node, input, *shape, **kwargs):
    # The graph's shapes are the example inputs': the result's recorded shape is the target.
    return cx.reshape(cx.f(input, node.name), node, node.name)


def _split(cx, node, input, sizes, dim):
    """The parts of `input` along `dim`: Split of the tensor's own integers when it is
    quantized (each part keeps its scale and zero point, as PyTorch's do), else of the
    float tensor."""
    rank = _rank(cx, input)
    source = cx.quantized_source(input)
    whole = source.name if source is not None else cx.f(input, node.name)
    names = cx.g.multi_node("Split", [whole, cx.g.constant(np.asarray(sizes, np.int64),
                                                           "split")],
                            node.name, len(sizes), axis=int(dim) % rank)
    if source is None:
        return tuple(Float(n) for n in names)
    return tuple(Quantized(n, source.scale, source.zero_point, source.elem_type)
                 for n in names)


@function("torch.chunk")
@method("chunk")
def _chunk(cx, node, input, chunks, dim=0):
    length = cx.shape_of(input)[dim]
    step = -(-length // chunks)
    sizes = [min(step, length - start) for start in range(0, length, step)]
    return _split(cx, node, input, sizes, dim)


@function("torch.functional.split")
@method("split")
def _split_function(cx, node, tensor, split_size_or_sections, dim=0):
    length = cx.shape_of(tensor)[dim]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        sizes = [min(step, length - start) for start in range(0, length, step)]
    else:
        sizes = list(split_size_or_sections)
    return _split(cx, node, tensor, sizes, dim)


@function("torch.nn.functional.pad")
def _pad(cx, node, input, pad, mode="constant", value=None):
    if mode != "constant":
        raise OnnxExportError(f"{cx.where(node)}: pad mode '{mode}' has no ONNX mapping here "
                              "(constant only)")
    rank = _rank(cx, input)
    pad = [int(p) for p in pad]
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(pad) // 2):  # PyTorch lists the last axis first
        begins[rank - 1 - i], ends[rank - 1 - i] = pad[2 * i], pad[2 * i + 1]
    inputs = [cx.f(input, node.name), cx.g.constant(np.asarray(begins + ends, np.int64),
                                                    "pads")]
    if value:
        inputs.append(cx.g.constant(np.asarray(value, dtype=cx.numpy_dtype(node)), "value"))
    return cx.g.node("Pad", inputs, node.name, mode="constant")


@function("torch.narrow")
@method("narrow")
def _narrow(cx, node, input, dim, start, length):
    """Slice of `input` along `dim`: of the tensor's own integers when it is quantized (the
    part keeps its scale and zero point, as PyTorch's does), else of the float tensor."""
    rank = _rank(cx, input)
    source = cx.quantized_source(input)
    whole = source.name if source is not None else cx.f(input, node.name)
    start = int(start) % cx.shape_of(input)[dim] if int(start) < 0 else int(start)
    name = cx.g.node("Slice", [whole, cx.g.constant(np.asarray([start], np.int64), "starts"),
                               cx.g.constant(np.asarray([start + int(length)], np.int64),
                                             "ends"),
                               cx.g.constant(np.asarray([int(dim) % rank], np.int64), "axes")],
                     node.name)
    if source is None:
        return Float(name)
    return Quantized(name, source.scale, source.zero_point, source.elem_type)


@function("torch.nn.functional.interpolate")
def _interpolate(cx, node, input, size=None, scale_factor=None, mode="nearest",
                 align_corners=None, recompute_scale_factor=None, antialias=False):
    # The graph's shapes are the example inputs': the result's recorded shape is the size.
    if antialias:
        raise OnnxExportError(f"{cx.where(node)}: interpolate with antialias has no ONNX "
                              "mapping here")
    if mode == "nearest":
        attributes = dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                          nearest_mode="floor")
    elif mode in ("linear", "bilinear", "trilinear"):
        attributes = dict(mode="linear", coordinate_transformation_mode="align_corners"
                          if align_corners else "pytorch_half_pixel")
    else:
        raise OnnxExportError(f"{cx.where(node)}: interpolate mode '{mode}' has no ONNX "
                              "mapping here (nearest, linear, bilinear, trilinear)")
    sizes = np.asarray(cx.recorded_shape(node), dtype=np.int64)
    return cx.g.node("Resize", [cx.f(input, node.name), "", "",
                                cx.g.constant(sizes, "sizes")], node.name, **attributes)


@method("expand")
def _expand(cx, node, input, *sizes):
    shape = np.asarray(cx.recorded_shape(node), dtype=np.int64)
    return cx.g.node("Expand", [cx.f(input, node.name), cx.g.constant(shape, "shape")],
                     node.name)


@function("torch.permute")
@method("permute")
def _permute(cx, node, input, *dims):
    dims = list(dims[0]) if len(dims) == 1 and isinstance(dims[0], (list, tuple)) else list(dims)
    rank = _rank(cx, input)
    return cx.g.node("Transpose", [cx.f(input, node.name)], node.name,
                     perm=[d % rank for d in dims])


@function("torch.transpose")
@method("transpose")
def _transpose(cx, node, input, dim0, dim1):
    rank = _rank(cx, input)
    perm = list(range(rank))
    perm[dim0 % rank], perm[dim1 % rank] = perm[dim1 % rank], perm[dim0 % rank]
    return cx.g.node("Transpose", [cx.f(input, node.name)], node.name, perm=perm)

