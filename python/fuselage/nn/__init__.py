"""Fused float modules fuselage has and PyTorch 1.13 lacks: a conv whose output is added to
a second input (the residual), optionally followed by a relu; a conv followed by one of
relu, relu6, hardswish (ConvAct2d).

    import fuselage.nn
    fused = fuselage.nn.ConvAddReLU2d(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
    y = fused(x, residual)                  # relu(conv(x) + residual)

They are torch.ao.nn.intrinsic fused modules (nn.Sequential-based, as nni.ConvReLU2d is),
holding their parts as the children fuselage's types hold them (graph/NAMING.md:
`nni.ConvAddReLU2d` = `0`: the conv, `1`: the relu; `nni.ConvAdd2d` = `0`: the conv);
batch norm is folded into the conv first (fuselage.fusers). The conv may also be its
reference form (nnqr.Conv2d), as in a reference quantized model.

The quantized forms, which take two quantized tensors, are in fuselage.nn.quantized.
For quantization-aware training the batch norm is kept: ConvBnAdd2d / ConvBnAddReLU2d
(fuselage.fusers with is_qat=True), whose QAT forms (fuselage.nn.qat) train it as
nniqat.ConvBn2d does and fold it when converted.

fuselage.nn.FusedSubgraph (fuselage.nn.subgraph) replays the steps its model carries: the
nodes a multi-output or FusedSubgraph pattern fused, or a type a backend config declares
(fused_module_type; a subclass named after the type).
"""

import torch.ao.nn.intrinsic as nni
import torch.ao.nn.quantized.reference as nnqr
import torch.nn as nn

from fuselage.errors import ModuleError

__all__ = ["ConvAct2d", "ConvAdd2d", "ConvAddReLU2d", "ConvBnAdd2d", "ConvBnAddReLU2d",
           "FusedSubgraph", "qat", "quantized"]

# The activations nni.ConvAct2d may end with (graph/module_schema.cc).
_CONV_ACT_ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.Hardswish)


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


def _check_bn(bn, cls):
    if type(bn) is not nn.BatchNorm2d:
        raise ModuleError(f"{cls}: child 1 must be an nn.BatchNorm2d; got "
                          f"{type(bn).__qualname__}")


class ConvBnAdd2d(nni._FusedModule):
    """bn(conv(x)) + extra, the batch norm kept (quantization-aware training's fusion of
    conv-bn-add; fuselage.nn.qat.ConvBnAdd2d trains it). Children: `0` the conv, `1` the
    batch norm."""

    def __init__(self, conv, bn):
        _check_conv(conv, "ConvBnAdd2d")
        _check_bn(bn, "ConvBnAdd2d")
        super().__init__(conv, bn)

    def forward(self, input, extra):
        return self[1](self[0](input)) + extra


class ConvBnAddReLU2d(nni._FusedModule):
    """relu(bn(conv(x)) + extra), the batch norm kept (quantization-aware training's
    fusion of conv-bn-add-relu; fuselage.nn.qat.ConvBnAddReLU2d trains it). Children: `0`
    the conv, `1` the batch norm, `2` the relu."""

    def __init__(self, conv, bn, relu):
        _check_conv(conv, "ConvBnAddReLU2d")
        _check_bn(bn, "ConvBnAddReLU2d")
        if type(relu) is not nn.ReLU:
            raise ModuleError(f"ConvBnAddReLU2d: child 2 must be an nn.ReLU; got "
                              f"{type(relu).__qualname__}")
        super().__init__(conv, bn, relu)

    def forward(self, input, extra):
        return self[2](self[1](self[0](input)) + extra)


class ConvAct2d(nni._FusedModule):
    """act(conv(x)), act one of ReLU, ReLU6, Hardswish: what a pattern entry with activation
    alternatives (`(ReLU | ReLU6 | Hardswish, (BatchNorm2d?, Conv2d))`) fuses into, the batch
    norm folded. Children: `0` the conv, `1` the activation.

        fused = fuselage.nn.ConvAct2d(nn.Conv2d(8, 8, 3), nn.ReLU6())
        y = fused(x)                         # relu6(conv(x))
    """

    def __init__(self, conv, act):
        _check_conv(conv, "ConvAct2d")
        if type(act) not in _CONV_ACT_ACTIVATIONS:
            raise ModuleError(f"ConvAct2d: child 1 must be an nn.ReLU, nn.ReLU6 or nn.Hardswish; "
                            f"got {type(act).__qualname__}")
        super().__init__(conv, act)

    def forward(self, input):
        return self[1](self[0](input))


from fuselage.nn import qat, quantized  # noqa: E402  (after the float classes they refer to)
from fuselage.nn.subgraph import FusedSubgraph  # noqa: E402
