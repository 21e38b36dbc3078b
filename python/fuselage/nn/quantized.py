"""Quantized fused conv-add(-relu) modules: both inputs quantized, the output quantized,
with the integer values fuselage's native kernel gives bit for bit.

    import fuselage.nn.quantized as fnq
    m = fnq.ConvAddReLU2d(8, 8, 3, padding=1)      # the constructor of nnq.Conv2d
    m.set_weight_bias(qweight, bias)                # qint8 weight, float32 bias
    m.scale, m.zero_point = 0.05, 0
    qy = m(qx, qresidual)                           # quint8 in, quint8 out

They follow PyTorch's quantized conv conventions (they are nnq.Conv2d subclasses, as
nniq.ConvReLU2d is): a qint8 weight quantized per tensor or per output channel (any weight
zero point), a float32 bias, the output's `scale` and `zero_point` as attributes; from_float
and from_reference build them as nnq.Conv2d's do. Export writes them as
`nniq.ConvAdd2d` / `nniq.ConvAddReLU2d` (graph/NAMING.md).

The arithmetic is runtime/quantized/conv.cc's QuantizedConvAdd2d, step by step:
  acc[c]  = sum((x - x_zp) * (w - w_zp[c]))            exact integers (a float64 conv of
                                                         integer-valued tensors: every
                                                         partial sum is an integer < 2^53)
  conv    = float32((acc * x_scale) * w_scale[c] + bias[c])   in float64, then rounded
  sum     = conv + float32(extra_scale) * float32(e - e_zp)   in float32
  relu    : sum = max(sum, 0)
  q       = clamp(round(float32(zp) + round(sum * inv_scale)))  inv_scale = 1.0f / float(scale),
                                                         rounding half to even, NaN -> zp
The output has the input's dtype (quint8 or qint8).
"""

import torch
import torch.ao.nn.quantized as nnq
import torch.nn.functional as F

from fuselage import nn as _fnn
from fuselage.errors import ModuleError

__all__ = ["ConvAdd2d", "ConvAddReLU2d"]

_INT_DTYPES = {torch.quint8: torch.uint8, torch.qint8: torch.int8}


def _check_input(tensor, what, op):
    if not isinstance(tensor, torch.Tensor) or not tensor.is_quantized:
        got = f"a {tensor.dtype} tensor" if isinstance(tensor, torch.Tensor) else \
            type(tensor).__name__
        raise ModuleError(f"{op}: {what} must be a quantized tensor (torch.quint8 or "
                          f"torch.qint8); got {got}")
    if tensor.dtype not in _INT_DTYPES:
        raise ModuleError(f"{op}: {what} has dtype {tensor.dtype}; expected torch.quint8 or "
                          "torch.qint8")
    if tensor.qscheme() != torch.per_tensor_affine:
        raise ModuleError(f"{op}: {what} is quantized with {tensor.qscheme()}; expected "
                          "torch.per_tensor_affine")


def _weight_qparams(weight, out_channels):
    """Per output channel: the scales (float64) and zero points of the qint8 weight."""
    if weight.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric):
        return (weight.q_per_channel_scales().to(torch.float64),
                weight.q_per_channel_zero_points().to(torch.float64))
    return (torch.full((out_channels,), float(weight.q_scale()), dtype=torch.float64),
            torch.full((out_channels,), float(weight.q_zero_point()), dtype=torch.float64))


def quantize_like_fuselage(values, scale, zero_point, dtype):
    """fuselage's QuantizeValue (runtime/quantized/quant_math.cc, PyTorch's quantize_val)
    on a float32 tensor: the integer values of the quantized result, as int64."""
    inv_scale = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(scale, dtype=torch.float32)
    info = torch.iinfo(_INT_DTYPES[dtype])
    shifted = torch.round(values * inv_scale) + torch.tensor(float(zero_point), dtype=torch.float32)
    q = torch.round(shifted).clamp(info.min, info.max)
    q = torch.where(torch.isnan(values), torch.tensor(float(zero_point)), q)
    return q.to(torch.int64)


class _ConvAddBase(nnq.Conv2d):
    _RELU = False

    def _get_name(self):
        return "QuantizedFuselage" + type(self).__name__

    # The weight and bias are kept as tensors, not packed for a PyTorch engine: forward
    # computes from them, and every weight fuselage's kernel takes (a per-tensor weight
    # with a non-zero zero point, which onednn's prepack refuses) is held under any engine.
    # weight(), bias(), state_dict, copy and pickling all go through these two methods.
    def set_weight_bias(self, w, b):
        op = type(self).__name__
        if not isinstance(w, torch.Tensor) or not w.is_quantized or w.dtype != torch.qint8 \
                or w.dim() != 4:
            raise ModuleError(f"{op}: the weight must be a 4-d torch.qint8 quantized tensor; "
                              f"got {getattr(w, 'dtype', type(w).__name__)} "
                              f"{list(getattr(w, 'shape', []))}")
        if w.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric) and \
                w.q_per_channel_axis() != 0:
            raise ModuleError(f"{op}: the weight is quantized per channel along axis "
                              f"{w.q_per_channel_axis()}; expected axis 0 (output channels)")
        if b is not None and (not isinstance(b, torch.Tensor) or b.dtype != torch.float32
                              or list(b.shape) != [w.shape[0]]):
            raise ModuleError(f"{op}: the bias must be None or float32 of shape "
                              f"[{w.shape[0]}]; got {getattr(b, 'dtype', type(b).__name__)} "
                              f"{list(getattr(b, 'shape', []))}")
        self._weight_tensor = w
        self._bias_tensor = None if b is None else b.detach()

    def _weight_bias(self):
        return self._weight_tensor, self._bias_tensor

    def forward(self, input, extra):
        op = type(self).__name__
        _check_input(input, "input", op)
        _check_input(extra, "extra input", op)
        if input.dim() != 4:
            raise ModuleError(f"{op}: input has shape {list(input.shape)}; expected 4 "
                              "dimensions [N, C, H, W]")
        if self.padding_mode != "zeros":
            raise ModuleError(f"{op}: padding_mode is '{self.padding_mode}'; only 'zeros' is "
                              "supported")
        weight, bias = self.weight(), self.bias()
        out_channels = weight.shape[0]
        w_scales, w_zero_points = _weight_qparams(weight, out_channels)
        x = input.int_repr().to(torch.float64) - float(input.q_zero_point())
        w = weight.int_repr().to(torch.float64) - w_zero_points.view(-1, 1, 1, 1)
        acc = F.conv2d(x, w, None, self.stride, self.padding, self.dilation, self.groups)
        if extra.shape != acc.shape:
            raise ModuleError(f"{op}: extra input has shape {list(extra.shape)}; expected the "
                              f"conv output's shape {list(acc.shape)}")
        conv = acc * float(input.q_scale()) * w_scales.view(1, -1, 1, 1)
        if bias is not None:
            conv = conv + bias.detach().to(torch.float32).to(torch.float64).view(1, -1, 1, 1)
        extra_scale = torch.tensor(float(extra.q_scale()), dtype=torch.float32)
        residual = (extra.int_repr().to(torch.int64) - extra.q_zero_point()).to(torch.float32)
        total = conv.to(torch.float32) + extra_scale * residual
        if self._RELU:
            total = torch.where(total < 0, torch.zeros_like(total), total)  # max(sum, 0.0f)
        q = quantize_like_fuselage(total, self.scale, self.zero_point, input.dtype)
        return torch._make_per_tensor_quantized_tensor(
            q.to(_INT_DTYPES[input.dtype]), float(self.scale), int(self.zero_point))

    @classmethod
    def from_float(cls, mod):
        """From a prepared float fused module (fuselage.nn.ConvAdd(ReLU)2d with a qconfig
        and an activation_post_process), as nnq.Conv2d.from_float does for nni.ConvReLU2d."""
        if type(mod) is not cls._FLOAT_MODULE:
            raise ModuleError(f"{cls.__name__}.from_float: expected a "
                              f"{cls._FLOAT_MODULE.__module__}.{cls._FLOAT_MODULE.__name__}; "
                              f"got {type(mod).__qualname__}")
        if not hasattr(mod, "qconfig") or mod.qconfig is None:
            raise ModuleError(f"{cls.__name__}.from_float: the float module has no qconfig")
        activation_post_process = getattr(mod, "activation_post_process", None)
        return cls.get_qconv(mod[0], activation_post_process, mod.qconfig.weight())

    @classmethod
    def from_reference(cls, ref_fused, output_scale, output_zero_point):
        """From a reference fused module whose child 0 is an nnqr.Conv2d, as
        nniq.ConvReLU2d.from_reference does."""
        return super().from_reference(ref_fused[0], output_scale, output_zero_point)


class ConvAdd2d(_ConvAddBase):
    """quantized conv(x) + extra, both inputs quantized (fuselage's nniq.ConvAdd2d)."""
    _FLOAT_MODULE = _fnn.ConvAdd2d


class ConvAddReLU2d(_ConvAddBase):
    """quantized relu(conv(x) + extra), both inputs quantized (nniq.ConvAddReLU2d)."""
    _FLOAT_MODULE = _fnn.ConvAddReLU2d
    _RELU = True
