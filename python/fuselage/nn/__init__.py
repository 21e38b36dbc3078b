"""Fused float modules fuselage has and PyTorch 1.13 lacks: a conv whose output is added to
a second input (the residual), optionally followed by a relu.

    import fuselage.nn
    fused = fuselage.nn.ConvAddReLU2d(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
    y = fused(x, residual)                  # relu(conv(x) + residual)

They are torch.ao.nn.intrinsic fused modules (nn.Sequential-based, as nni.ConvReLU2d is),
holding their parts as the children fuselage's types hold them (graph/NAMING.md:
`nni.ConvAddReLU2d` = `0`: the conv, `1`: the relu; `nni.ConvAdd2d` = `0`: the conv);
batch norm is folded into the conv first (fuselage.fusers). The conv may also be its
reference form (nnqr.Conv2d), as in a reference quantized model.

The quantized forms, which take two quantized tensors, are in fuselage.nn.quantized.
"""

import torch.ao.nn.intrinsic as nni
import torch.ao.nn.quantized.reference as nnqr
import torch.nn as nn

from fuselage.errors import ModuleError

__all__ = ["ConvAdd2d", "ConvAddReLU2d", "quantized"]


def _check_conv(conv, cls):
    if type(conv) not in (nn.Conv2d, nnqr.Conv2d):
        raise ModuleError(f"{cls}: child 0 must be an nn.Conv2d (or nnqr.Conv2d); got "
                        f"{type(conv).__qualname__}")


class ConvAdd2d(nni._FusedModule):
    """conv(x) + extra. Children: `0` the conv."""

    def __init__(self, conv):
        _check_conv(conv, "ConvAdd2d")
        super().__init__(conv)

    def forward(self, input, extra):
        return self[0](input) + extra


class ConvAddReLU2d(nni._FusedModule):
    """relu(conv(x) + extra). Children: `0` the conv, `1` the relu."""

    def __init__(self, conv, relu):
        _check_conv(conv, "ConvAddReLU2d")
        if type(relu) is not nn.ReLU:
            raise ModuleError(f"ConvAddReLU2d: child 1 must be an nn.ReLU; got "
                            f"{type(relu).__qualname__}")
        super().__init__(conv, relu)

    def forward(self, input, extra):
        return self[1](self[0](input) + extra)


from fuselage.nn import quantized  # noqa: E402  (after the float classes it refers to)
