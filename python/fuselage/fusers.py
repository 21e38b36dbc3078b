"""Fuser methods for the conv-add(-relu) patterns, with PyTorch's fuser signature, so
a BackendPatternConfig can name them:

    from torch.ao.quantization.backend_config import BackendPatternConfig
    from torch.ao.quantization.fx.match_utils import MatchAllNode
    import fuselage.fusers
    pattern = (nn.ReLU, (torch.add, (nn.BatchNorm2d, nn.Conv2d), MatchAllNode))
    cfg = BackendPatternConfig()._set_pattern_complex_format(pattern) \\
        .set_fuser_method(fuselage.fusers.fuse_conv_bn_add_relu) ...

(on PyTorch 1.13: `BackendPatternConfig(pattern)`; PyTorch 2 reads the constructor's
argument in execution order.)

prepare_fx / fuse_fx call a fuser as `fuser(is_qat, *matched)`, where `matched` is the
matched pattern with each node replaced by its module (call_module), its target
(call_function: torch.add / operator.add) or MatchAllNode, outermost op first
(torch/ao/quantization/fx/fusion_patterns.py). So for the pattern above the call is
`fuse_conv_bn_add_relu(is_qat, relu, (add, (bn, conv), extra))`; for
`(torch.add, nn.Conv2d, MatchAllNode)` it is `fuse_conv_add(is_qat, add, conv, extra)`. The
residual may be either operand of the add (`(add, extra, conv)` works too).

Batch norm is folded into the conv as PyTorch's fuse_conv_bn does for inference
(torch.nn.utils.fusion.fuse_conv_bn_eval); the results are fuselage.nn.ConvAdd2d /
ConvAddReLU2d. With is_qat=True (prepare_qat_fx) the batch norm is kept, as PyTorch's
fuse_conv_bn keeps it for quantization-aware training: fuselage.nn.ConvBnAdd2d /
ConvBnAddReLU2d, whose QAT forms (fuselage.nn.qat) train it. The patterns without a batch
norm have no QAT form yet: is_qat=True is refused for them.
"""

import operator

import torch
import torch.nn as nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from fuselage import nn as fnn
from fuselage.errors import ModuleError

__all__ = ["fuse_conv_add", "fuse_conv_add_relu", "fuse_conv_bn_add", "fuse_conv_bn_add_relu"]

_ADDS = (torch.add, operator.add, "add")


def _describe(item):
    if isinstance(item, nn.Module):
        return type(item).__qualname__
    return getattr(item, "__name__", repr(item))


def _conv_operand(fuser, add, operands, with_bn, is_qat=False):
    """The conv (bn folded in) among the add's operands: a Conv2d, or (bn, conv); with
    is_qat the (conv, bn) pair, the batch norm kept."""
    if add not in _ADDS:
        raise ModuleError(f"{fuser}: the add of the pattern is {_describe(add)}; expected "
                          "torch.add or operator.add")
    for operand in operands:
        if with_bn and isinstance(operand, tuple) and len(operand) == 2:
            bn, conv = operand
            if type(bn) is nn.BatchNorm2d and type(conv) is nn.Conv2d:
                if is_qat:
                    return conv, bn
                if conv.training or bn.training:
                    raise ModuleError(f"{fuser}: conv and batch norm must be in eval mode to "
                                      "fold the batch norm (for quantization-aware training "
                                      "call it with is_qat=True)")
                return fuse_conv_bn_eval(conv, bn)
        if not with_bn and type(operand) is nn.Conv2d:
            return operand
    wanted = "(nn.BatchNorm2d, nn.Conv2d)" if with_bn else "nn.Conv2d"
    got = ", ".join(str(tuple(_describe(i) for i in o)) if isinstance(o, tuple) else
                    _describe(o) for o in operands)
    raise ModuleError(f"{fuser}: the add's operands are {got}; expected one of them to be "
                      f"{wanted}")


def _no_qat(fuser, is_qat):
    if is_qat:
        raise ModuleError(f"{fuser}: is_qat=True is not supported: fuselage has no "
                          "quantization-aware-training form of conv-add without a batch norm "
                          "(fuse_conv_bn_add / fuse_conv_bn_add_relu have one)")


def _split_add(fuser, add_pattern):
    if not isinstance(add_pattern, tuple) or len(add_pattern) != 3:
        raise ModuleError(f"{fuser}: expected the add pattern (add, operand, operand); got "
                          f"{add_pattern!r:.120}")
    return add_pattern[0], add_pattern[1:]


def _relu(fuser, relu):
    if type(relu) is not nn.ReLU:
        raise ModuleError(f"{fuser}: the outermost op is {_describe(relu)}; expected nn.ReLU")
    return relu


def fuse_conv_bn_add_relu(is_qat, relu, add_pattern):
    """(nn.ReLU, (add, (nn.BatchNorm2d, nn.Conv2d), MatchAllNode)) -> ConvAddReLU2d; with
    is_qat: fuselage.nn.ConvBnAddReLU2d, the batch norm kept."""
    add, operands = _split_add("fuse_conv_bn_add_relu", add_pattern)
    conv = _conv_operand("fuse_conv_bn_add_relu", add, operands, with_bn=True, is_qat=is_qat)
    relu = _relu("fuse_conv_bn_add_relu", relu)
    return fnn.ConvBnAddReLU2d(*conv, relu) if is_qat else fnn.ConvAddReLU2d(conv, relu)


def fuse_conv_add_relu(is_qat, relu, add_pattern):
    """(nn.ReLU, (add, nn.Conv2d, MatchAllNode)) -> ConvAddReLU2d."""
    _no_qat("fuse_conv_add_relu", is_qat)
    add, operands = _split_add("fuse_conv_add_relu", add_pattern)
    conv = _conv_operand("fuse_conv_add_relu", add, operands, with_bn=False)
    return fnn.ConvAddReLU2d(conv, _relu("fuse_conv_add_relu", relu))


def fuse_conv_bn_add(is_qat, add, *operands):
    """(add, (nn.BatchNorm2d, nn.Conv2d), MatchAllNode) -> ConvAdd2d; with is_qat:
    fuselage.nn.ConvBnAdd2d, the batch norm kept."""
    conv = _conv_operand("fuse_conv_bn_add", add, operands, with_bn=True, is_qat=is_qat)
    return fnn.ConvBnAdd2d(*conv) if is_qat else fnn.ConvAdd2d(conv)


def fuse_conv_add(is_qat, add, *operands):
    """(add, nn.Conv2d, MatchAllNode) -> ConvAdd2d."""
    _no_qat("fuse_conv_add", is_qat)
    return fnn.ConvAdd2d(_conv_operand("fuse_conv_add", add, operands, with_bn=False))
