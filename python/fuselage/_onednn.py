"""A PT2E reference model lowered to the oneDNN int8 ops of stock PyTorch.

The reference form (torchao's convert_pt2e or fuselage.pt2e.convert_pt2e) keeps every
quantized op as quantized_decomposed dequantize -> float aten op -> quantize over plain
uint8 / int8 tensors. Here each conv and linear whose input and weight are dequantized
becomes the op torchao's lower_pt2e_quantized_to_x86 gives it:

    dq(x) -> conv2d(dq(w)) [-> relu | hardtanh | hardswish | silu] [-> q]
        onednn.qconv_pointwise(x, sx, zx, packed, w_scales, w_zps, bias, ...,
                               out_scale, out_zp, out_dtype, attr, scalars, algorithm)
    dq(x) -> conv2d(dq(w)) -> add(dq(accum)) [-> relu] [-> q]
        onednn.qconv2d_pointwise.binary(..., accum, ..., "sum", 1.0, unary, [], "")
    dq(x) -> linear(dq(w)) [-> relu] [-> q]
        onednn.qlinear_pointwise(x, sx, zx, packed, w_scales, w_zps, bias, ...)

A conv1d fuses relu only, a conv3d no unary op (oneDNN's limits: the op stays after it),
and an add whose other input is not of the conv output's shape (a broadcast bias or
mean) stays apart, as in torchao's lowering. Without a quantize after it the op gives
float32 (scale 1, zero point 0). Weights are packed once here (onednn.qconv_prepack /
qlinear_prepack). Everything else stays as the reference has it, so the result runs on
stock PyTorch, without fuselage and without the deprecated quantized dtypes. The
reference model is not changed.
"""

import copy

import torch
import torch.fx

from fuselage._values import SHAPE_META, attribute
from fuselage.errors import ExportError

_aten = torch.ops.aten
_Q = torch.ops.quantized_decomposed

_DQ_PER_TENSOR = (_Q.dequantize_per_tensor.default,)
_DQ_PER_CHANNEL = (_Q.dequantize_per_channel.default,)
_Q_PER_TENSOR = (_Q.quantize_per_tensor.default,)
_CONVS = {_aten.conv1d.default: 1, _aten.conv2d.default: 2, _aten.conv3d.default: 3}
_ADDS = (_aten.add.Tensor, _aten.add_.Tensor)
_RELUS = (_aten.relu.default, _aten.relu_.default)
# aten op -> (oneDNN post-op name, its scalars given the node)
_UNARY = {
    _aten.relu.default: ("relu", lambda n: []),
    _aten.relu_.default: ("relu", lambda n: []),
    _aten.hardtanh.default: ("hardtanh", lambda n: [_arg(n, 1, "min_val", -1.0),
                                                    _arg(n, 2, "max_val", 1.0)]),
    _aten.hardtanh_.default: ("hardtanh", lambda n: [_arg(n, 1, "min_val", -1.0),
                                                     _arg(n, 2, "max_val", 1.0)]),
    _aten.hardswish.default: ("hardswish", lambda n: []),
    _aten.hardswish_.default: ("hardswish", lambda n: []),
    _aten.silu.default: ("swish", lambda n: []),
    _aten.silu_.default: ("swish", lambda n: []),
}
# The unary ops oneDNN's qconv_pointwise fuses, by conv rank: conv2d takes every post-op
# of _UNARY, conv1d relu only, conv3d none ("Unsupported post op relu for quantized
# pointwise conv3d" at every call). An op left out stays after the conv, float.
_CONV_UNARY = {1: _RELUS, 2: tuple(_UNARY), 3: ()}


def _arg(node, index, name, default):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _call(node, targets):
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and \
        node.target in targets


def _inline_qparams(node):
    """(scale, zero point, dtype) of a per-tensor quantize or dequantize `node` of uint8 /
    int8 values whose parameters are inline numbers, else None."""
    scale, zero_point = node.args[1], node.args[2]
    dtype = node.args[5] if len(node.args) > 5 else node.kwargs.get("dtype")
    if not isinstance(scale, float) or not isinstance(zero_point, int) or \
            dtype not in (torch.uint8, torch.int8):
        return None
    return scale, zero_point, dtype


def _per_tensor_input(node):
    """(the quantized tensor's node, scale, zero point) of a per-tensor dequantize of a
    uint8 / int8 value with inline parameters, else None."""
    qparams = _call(node, _DQ_PER_TENSOR) and _inline_qparams(node)
    return (node.args[0], *qparams[:2]) if qparams else None


def _constant(gm, node):
    if isinstance(node, torch.fx.Node) and node.op == "get_attr":
        value = attribute(gm, node.target)
        if isinstance(value, torch.Tensor):
            return value
    return None


def _weight(gm, node):
    """(int8 weight, float32 scales, int64 zero points) of a dequantized constant weight,
    per output channel (axis 0) or per tensor, else None."""
    if _call(node, _DQ_PER_CHANNEL):
        weight, scales, zero_points = (_constant(gm, a) for a in node.args[:3])
        if weight is None or scales is None or zero_points is None or node.args[3] != 0 \
                or weight.dtype != torch.int8:
            return None
        return weight, scales.to(torch.float32), zero_points.to(torch.int64)
    if _call(node, _DQ_PER_TENSOR):
        weight = _constant(gm, node.args[0])
        if weight is None or weight.dtype != torch.int8 or not isinstance(node.args[1], float):
            return None
        channels = weight.shape[0]
        return (weight, torch.full((channels,), node.args[1], dtype=torch.float32),
                torch.full((channels,), int(node.args[2]), dtype=torch.int64))
    return None


def _reads_constant(gm, node):
    """Whether `node` is a constant, or quantizes / dequantizes one."""
    while _call(node, _DQ_PER_TENSOR + _Q_PER_TENSOR):
        node = node.args[0]
    return _constant(gm, node) is not None


def _only_user(node):
    return next(iter(node.users)) if len(node.users) == 1 else None


def _quantize_after(node):
    """(quantize node, scale, zero point, dtype) if `node`'s only user quantizes it per
    tensor with inline parameters, else None."""
    q = _only_user(node)
    qparams = _call(q, _Q_PER_TENSOR) and _inline_qparams(q)
    return (q, *qparams) if qparams else None


def _shape(gm, node):
    """The shape of `node`'s value where it is known: shape propagation's (example_inputs),
    torch.export's fake value, the one fuselage's convert_pt2e carried over from it
    (_exported.give_shapes), a constant's own; through a quantize or dequantize, the
    value it reads. None if unknown."""
    if not isinstance(node, torch.fx.Node):
        return None
    meta = node.meta.get("tensor_meta")
    value = node.meta.get("val")
    exported = node.meta.get("fuselage", {}).get(SHAPE_META)
    if meta is not None and hasattr(meta, "shape"):
        return tuple(meta.shape)
    if isinstance(value, torch.Tensor):
        return tuple(value.shape)
    if exported is not None:
        return tuple(exported)
    constant = _constant(gm, node)
    if constant is not None:
        return tuple(constant.shape)
    if _call(node, _DQ_PER_TENSOR + _Q_PER_TENSOR):
        return _shape(gm, node.args[0])
    return None


def _input_shape(conv):
    """The shape of `conv`'s input where shape propagation recorded it, else None. oneDNN
    picks the packed weight's layout for that shape: packed for none, a 1x1 conv of
    resnet50 ran up to 200x slower on every call (the weight reordered each time)."""
    meta = conv.args[0].meta.get("tensor_meta") if isinstance(conv.args[0], torch.fx.Node) \
        else None
    return list(meta.shape) if meta is not None else None


class _Lowerer:
    def __init__(self, gm):
        self.gm = gm
        self.count = 0

    def constant(self, prefix, value):
        """A get_attr of `value`, a new buffer of the module."""
        name = f"_onednn_{prefix}_{self.count}"
        self.gm.register_buffer(name, value)
        return self.gm.graph.get_attr(name)

    def weight_constants(self, op, packed, scales, zero_points):
        """get_attrs, before `op`, of its packed weight and per-channel scales and zero
        points, as the oneDNN ops read them."""
        with self.gm.graph.inserting_before(op):
            return (self.constant("packed", packed), self.constant("w_scales", scales),
                    self.constant("w_zps", zero_points))

    def tail(self, node, unary_targets):
        """The nodes after `node` its op absorbs and the op's post-op and output: (nodes,
        post-op name, scalars, output scale, zero point, dtype). A unary op of
        `unary_targets` joins it, then a quantize gives the output's parameters; without
        one the output is float32."""
        nodes, attr, scalars = [], "none", []
        user = _only_user(node)
        if _call(user, unary_targets):
            attr, scalars = _UNARY[user.target][0], _UNARY[user.target][1](user)
            nodes.append(user)
        quantized = _quantize_after(nodes[-1] if nodes else node)
        if quantized is None:
            return nodes, attr, scalars, 1.0, 0, torch.float32
        q, scale, zero_point, dtype = quantized
        return nodes + [q], attr, scalars, scale, zero_point, dtype

    def replace(self, group, last, target, args):
        """One call of `target` at `last`'s place standing for `group` (in graph order)."""
        with self.gm.graph.inserting_before(last):
            new = self.gm.graph.call_function(target, tuple(args))
        last.replace_all_uses_with(new)
        for node in reversed(group):
            self.gm.graph.erase_node(node)
        self.count += 1
        return new

    def accumulator(self, add, conv, quantized):
        """(accumulator node, scale, zero point) of the add's other input, a per-tensor
        dequantize: its integer tensor when the sum's output is `quantized`, else the
        dequantized float tensor (scale 1, zero point 0), as torchao's lowering reads it.
        The oneDNN sum writes into it, and takes it only contiguous in the conv output's
        channels-last layout: a channels-last copy where anything else reads it, else the
        tensor made channels-last contiguous (itself where it is, as a conv's output; a
        permuted one was refused at run time: "accum tensor must be contiguous"). None if
        the other input is no such dequantize."""
        other = add.args[1] if add.args[0] is conv else add.args[0]
        found = _per_tensor_input(other)
        if found is None or other is conv or len(add.args) != 2 or add.kwargs or \
                not self.adds_without_broadcast(conv, other):
            return None
        accum, scale, zero_point = found if quantized else (other, 1.0, 0)
        shared = len(accum.users) > 1 or len(other.users) > 1 or accum.op != "call_function"
        with self.gm.graph.inserting_before(add):
            accum = self.gm.graph.call_function(
                _aten.clone.default if shared else _aten.contiguous.default, (accum,),
                {"memory_format": torch.channels_last})
        return accum, scale, zero_point

    def adds_without_broadcast(self, conv, other):
        """Whether `other` has the shape of `conv`'s output, as the oneDNN sum's
        accumulator must (a broadcast one, a (C, 1, 1) bias or a (N, C, 1, 1) mean, was
        lowered and raised at every call). With a shape unknown (no example_inputs) a
        computed input is taken as a residual of the same shape and a constant, often a
        bias broadcast, is not."""
        conv_shape, other_shape = _shape(self.gm, conv), _shape(self.gm, other)
        if conv_shape is not None and other_shape is not None:
            return conv_shape == other_shape
        return not _reads_constant(self.gm, other)

    def lower_conv(self, conv):
        found, weight = _per_tensor_input(conv.args[0]), _weight(self.gm, conv.args[1])
        if found is None or weight is None:
            return
        x, x_scale, x_zp = found
        dims = _CONVS[conv.target]
        bias = _arg(conv, 2, "bias", None)
        if bias is not None and _constant(self.gm, bias) is None:
            return
        params = [_arg(conv, 3, "stride", [1] * dims), _arg(conv, 4, "padding", [0] * dims),
                  _arg(conv, 5, "dilation", [1] * dims)]
        if not all(isinstance(p, (list, tuple)) and len(p) == dims and
                   all(isinstance(v, int) for v in p) for p in params):
            return  # padding="same", or a parameter computed in the graph: stays reference
        stride, padding, dilation = (list(p) for p in params)
        groups = int(_arg(conv, 6, "groups", 1))
        w, w_scales, w_zps = weight
        packed_value = torch.ops.onednn.qconv_prepack(w, w_scales, x_scale, x_zp, stride,
                                                      padding, dilation, groups,
                                                      _input_shape(conv))
        head = [x, x_scale, x_zp, *self.weight_constants(conv, packed_value, w_scales, w_zps)]
        conv_args = [stride, padding, dilation, groups]
        add = _only_user(conv)
        if dims == 2 and _call(add, _ADDS):
            relu = _only_user(add) if _call(_only_user(add), _RELUS) else None
            tail = relu if relu is not None else add
            quantized = _quantize_after(tail)
            accumulator = self.accumulator(add, conv, quantized is not None)
            if accumulator is not None:
                q, scale, zero_point, dtype = quantized or (None, 1.0, 0, torch.float32)
                accum, accum_scale, accum_zp = accumulator
                group = [conv, add] + ([relu] if relu is not None else []) + \
                    ([q] if q is not None else [])
                self.replace(group, group[-1], torch.ops.onednn.qconv2d_pointwise.binary,
                             head + [accum, bias] + conv_args +
                             [scale, zero_point, dtype, accum_scale, accum_zp, "sum", 1.0,
                              "relu" if relu is not None else "none", [], ""])
                return
        nodes, attr, scalars, scale, zero_point, dtype = self.tail(conv, _CONV_UNARY[dims])
        group = [conv] + nodes
        self.replace(group, group[-1], torch.ops.onednn.qconv_pointwise.default,
                     head + [bias] + conv_args +
                     [scale, zero_point, dtype, attr, scalars, ""])

    def lower_linear(self, linear):
        found, weight = _per_tensor_input(linear.args[0]), _weight(self.gm, linear.args[1])
        bias = _arg(linear, 2, "bias", None)
        if found is None or weight is None or \
                (bias is not None and _constant(self.gm, bias) is None):
            return
        x, x_scale, x_zp = found
        w, w_scales, w_zps = weight
        packed, scales, zps = self.weight_constants(
            linear, torch.ops.onednn.qlinear_prepack(w, None), w_scales, w_zps)
        nodes, attr, scalars, scale, zero_point, dtype = self.tail(linear, _RELUS)
        group = [linear] + nodes
        self.replace(group, group[-1], torch.ops.onednn.qlinear_pointwise.default,
                     [x, x_scale, x_zp, packed, scales, zps, bias, scale, zero_point, dtype,
                      attr, scalars, ""])


_ONEDNN_CONVS = (torch.ops.onednn.qconv_pointwise.default,
                 torch.ops.onednn.qconv2d_pointwise.binary)


def _views_as_reshapes(gm):
    """Each aten.view of a value computed from a oneDNN conv's output made an
    aten.reshape. The conv gives its output channels-last, where the reference's conv
    gave it contiguous: conv -> view(N, -1) -> linear raised "view size is not compatible
    with input tensor's size and stride" at every call (torchao 0.18's lowering too).
    reshape is that view where the layout allows it, else a copy."""
    reached = set()
    for node in gm.graph.nodes:
        if _call(node, _ONEDNN_CONVS) or any(arg in reached for arg in node.all_input_nodes):
            reached.add(node)
            if _call(node, (_aten.view.default,)):
                node.target = _aten.reshape.default


def lower_to_onednn(reference, example_inputs=None):
    """A copy of the PT2E reference GraphModule `reference` with its quantized convs and
    linears as oneDNN int8 ops (module docstring). With `example_inputs`, each conv's
    weight is packed for its input's shape, found by running the copy once on them."""
    if not isinstance(reference, torch.fx.GraphModule):
        raise ExportError(f"lower_pt2e_quantized_to_x86: expected the torch.fx.GraphModule "
                          f"convert_pt2e gives; got {type(reference).__name__}")
    gm = copy.deepcopy(reference)
    if example_inputs is not None:
        from torch.fx.passes.shape_prop import ShapeProp
        try:
            with torch.no_grad():
                ShapeProp(gm).propagate(*example_inputs)
        except Exception as e:  # the user's inputs do not fit the model
            raise ExportError(f"lower_pt2e_quantized_to_x86: the model does not run on "
                              f"example_inputs: {e}") from None
    lowerer = _Lowerer(gm)
    for node in list(gm.graph.nodes):
        if _call(node, _CONVS):
            lowerer.lower_conv(node)
        elif _call(node, (_aten.linear.default,)):
            lowerer.lower_linear(node)
    _views_as_reshapes(gm)
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
    return gm
