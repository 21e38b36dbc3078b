"""Quantization-aware training forms of fuselage's conv-bn-add(-relu) modules: the batch
norm trains and the weight is fake-quantized after batch-norm scaling, exactly as
PyTorch's nniqat.ConvBn2d does it (they are that class, with the residual added after
its batch norm), so a user's conv-bn-add-relu pattern trains as PyTorch's
ConvBn2d + add + relu would.

    qat = fuselage.nn.qat.ConvBnAddReLU2d.from_float(fused)   # fused.qconfig set, as PyTorch
    y = qat(x, residual)                  # relu(bn(conv(x, fake_quant(w * bn scale))) + residual)
    float_module = qat.to_float()         # fuselage.nn.ConvAddReLU2d, batch norm folded

prepare_qat_fx swaps fuselage.nn.ConvBnAdd2d / ConvBnAddReLU2d (fuselage.fusers with
is_qat=True) for these unless the backend config names other QAT modules (fuselage._qat);
convert_fx converts their to_float().
"""

import torch.nn as nn

try:
    import torch.ao.nn.intrinsic.qat as _nniqat
except ImportError:  # PyTorch 1.13
    import torch.nn.intrinsic.qat as _nniqat

import fuselage.nn as _fnn

__all__ = ["ConvBnAdd2d", "ConvBnAddReLU2d"]


class ConvBnAdd2d(_nniqat.ConvBn2d):
    """bn(conv(x)) + extra: nniqat.ConvBn2d's forward, then the add. to_float() is
    fuselage.nn.ConvAdd2d of the conv with the batch norm folded."""

    _FLOAT_MODULE = _fnn.ConvBnAdd2d

    def forward(self, input, extra):
        return super().forward(input) + extra

    def to_float(self):
        fused = _fnn.ConvAdd2d(super().to_float())  # nniqat's fold: the conv alone
        fused.train(self.training)
        return fused


class ConvBnAddReLU2d(_nniqat.ConvBn2d):
    """relu(bn(conv(x)) + extra): nniqat.ConvBn2d's forward, then the add and relu.
    to_float() is fuselage.nn.ConvAddReLU2d of the conv with the batch norm folded."""

    _FLOAT_MODULE = _fnn.ConvBnAddReLU2d
    _FLOAT_RELU_MODULE = nn.ReLU
    _FUSED_FLOAT_MODULE = _fnn.ConvAddReLU2d  # nniqat's to_float wraps (conv, relu) in it

    def forward(self, input, extra):
        return nn.functional.relu(super().forward(input) + extra)
