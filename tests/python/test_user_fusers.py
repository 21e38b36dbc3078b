"""A user's own fuser method and fused module (issue 41 item 5), through fuselage.quantize_fx
with PyTorch's APIs only, checked against PyTorch's own fuse_fx / prepare_fx / convert_fx
on the same model and config.

The seed's case: conv -> bn -> add(residual) -> relu fused by the user's fuser into the
user's `_FusedModule` subclass ConvBnAddReLU(conv, bn), with a root-node and an
extra-inputs getter and a BackendPatternConfig for the class (observation, dtype configs,
root and reference module). PyTorch converts it to a reference pattern (the residual
dequantized, the add in float); fuselage lowers it with both inputs quantized.
"""
import copy
import math
import operator
import pickle

import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.backend_config import (BackendConfig, BackendPatternConfig,
                                                  DTypeConfig, ObservationType,
                                                  get_qnnpack_backend_config)
from torch.ao.quantization.fx.match_utils import MatchAllNode
import torch.ao.quantization.quantize_fx as torch_qfx

try:
    from torch.ao.nn.intrinsic import _FusedModule
    import torch.ao.nn.quantized.reference as nnqr
except ImportError:  # PyTorch 1.13 has them under torch.nn
    from torch.nn.intrinsic import _FusedModule
    import torch.nn.quantized._reference as nnqr

import fuselage.quantize_fx as qfx
from conftest import nested_pattern_config
from fuselage import ConfigTranslationError

int8 = DTypeConfig(input_dtype=torch.quint8, output_dtype=torch.quint8,
                   weight_dtype=torch.qint8, bias_dtype=torch.float)


# ---- the user's code: PyTorch's APIs only -------------------------------------------------

class ConvBnAddReLU(_FusedModule):
    def __init__(self, conv, bn):
        super().__init__(conv, bn)

    def forward(self, x, residual):
        return F.relu(self[1](self[0](x)) + residual)


def fuse_conv_bn_add_relu(is_qat, relu, add_pattern):
    _, bn_pattern, _ = add_pattern
    bn, conv = bn_pattern
    return ConvBnAddReLU(conv, bn)


def root_node_getter(pattern):
    relu, add_pattern = pattern
    _, bn_pattern, _ = add_pattern
    bn, conv = bn_pattern
    return conv


def extra_inputs_getter(pattern):
    relu, add_pattern = pattern
    _, _, extra_input = add_pattern
    return [extra_input]


def seed_backend_config(fuser=fuse_conv_bn_add_relu, fused_class=ConvBnAddReLU):
    fusion = nested_pattern_config((nn.ReLU, (torch.add, (nn.BatchNorm2d, nn.Conv2d),
                                              MatchAllNode))) \
        .set_fuser_method(fuser) \
        ._set_root_node_getter(root_node_getter) \
        ._set_extra_inputs_getter(extra_inputs_getter) \
        .set_dtype_configs([int8])
    fused = BackendPatternConfig(fused_class) \
        .set_observation_type(ObservationType.OUTPUT_USE_DIFFERENT_OBSERVER_AS_INPUT) \
        .set_dtype_configs([int8]) \
        .set_root_module(nn.Conv2d) \
        .set_reference_quantized_module(nnqr.Conv2d)
    return get_qnnpack_backend_config().set_backend_pattern_config(fusion) \
        .set_backend_pattern_config(fused)


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()

    def forward(self, x):
        identity = self.stem(x)
        return self.relu(torch.add(self.bn(self.conv(identity)), identity))


def residual_model(seed):
    torch.manual_seed(seed)
    model = Residual().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.2, 0.2)
        model.bn.running_var.uniform_(0.5, 1.5)
        model.bn.weight.uniform_(0.5, 1.5)
        model.bn.bias.uniform_(-0.2, 0.2)
    return model


def _quantized_args_of(gm, target, x):
    """Whether each arg of the call_module node `target` is a quantized tensor when `gm`
    runs on x."""
    seen = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            if n.op == "call_module" and n.target == target:
                args, _ = self.fetch_args_kwargs_from_env(n)
                seen[n.name] = [a.is_quantized for a in args]
            return super().run_node(n)

    with torch.no_grad():
        Recorder(gm).run(x)
    return seen


def _sqnr(reference, measured):
    return 10 * math.log10(float((reference ** 2).sum()) /
                           float(((reference - measured) ** 2).sum()))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_seeds_user_fused_module_lowers_with_both_inputs_quantized(seed):
    model = residual_model(seed)
    mapping = get_default_qconfig_mapping("qnnpack")
    example = torch.randn(1, 3, 16, 16)
    calibration = [torch.randn(1, 3, 16, 16) for _ in range(8)]
    converted, prepared_types = {}, {}
    for name, flow in (("torch", torch_qfx), ("fuselage", qfx)):
        prepared = flow.prepare_fx(copy.deepcopy(model), mapping, (example,),
                                   backend_config=seed_backend_config())
        prepared_types[name] = type(prepared.conv)
        for x in calibration:
            prepared(x)
        converted[name] = flow.convert_fx(prepared, qconfig_mapping=mapping,
                                          backend_config=seed_backend_config())
    # Both prepared models hold the user's fused module, which calibration runs.
    assert prepared_types == {"torch": ConvBnAddReLU, "fuselage": ConvBnAddReLU}

    x = torch.randn(4, 3, 16, 16)
    # PyTorch leaves the reference pattern: both inputs of the user's module dequantized.
    assert _quantized_args_of(converted["torch"], "conv", x) == {"conv": [False, False]}
    # fuselage lowers it: the fused op reads the input and the residual quantized, and
    # nothing dequantizes between the stem and it.
    assert _quantized_args_of(converted["fuselage"], "conv", x) == {"conv": [True, True]}
    fused = next(n for n in converted["fuselage"].graph.nodes if n.target == "conv")
    assert all(a.op == "call_module" and a.target == "stem" for a in fused.args)

    with torch.no_grad():
        ours, theirs, real = converted["fuselage"](x), converted["torch"](x), model(x)
    # Both quantize the output with the parameters of the same output observer (the
    # user's module's output in the prepared model). PyTorch adds the dequantized residual
    # in float to bn(conv_q(x)), its weight quantized before the batch norm; fuselage's
    # kernel adds in int8 after folding the batch norm into the weight it quantizes. So an
    # output near a rounding boundary may land one step apart, never more, and few do.
    step = converted["fuselage"].conv.scale
    assert float((ours - theirs).abs().max()) <= step * (1 + 1e-4)
    assert float(((ours - theirs).abs() > step / 2).float().mean()) < 0.15
    assert _sqnr(real, ours) > _sqnr(real, theirs) - 0.5


def test_copies_of_the_prepared_model_convert_the_same():
    model = residual_model(0)
    example = torch.randn(1, 3, 16, 16)
    prepared = qfx.prepare_fx(model, get_default_qconfig_mapping("qnnpack"), (example,),
                              backend_config=seed_backend_config())
    for _ in range(4):
        prepared(torch.randn(1, 3, 16, 16))
    copies = [copy.deepcopy(prepared), pickle.loads(pickle.dumps(prepared))]
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = qfx.convert_fx(prepared)(x)
        for other in copies:
            assert torch.equal(qfx.convert_fx(other)(x), expected)


def test_a_fused_module_without_the_batch_norm_is_refused_by_prepare_naming_the_node():
    def drops_the_batch_norm(is_qat, relu, add_pattern):
        _, (bn, conv), _ = add_pattern
        return ConvBnAddReLU(conv, nn.Identity())

    with pytest.raises(ConfigTranslationError, match="node 'conv'.*does not hold the "
                                                     "matched BatchNorm2d"):
        qfx.prepare_fx(residual_model(0), get_default_qconfig_mapping("qnnpack"),
                       (torch.randn(1, 3, 16, 16),),
                       backend_config=seed_backend_config(drops_the_batch_norm))


# ---- fuse_fx with the user's fusers, against PyTorch's fuse_fx -----------------------------

class ConvBnResidualReLU(nn.Module):
    """relu(add(maxpool(x), bn(conv(x)))), the conv-bn operand second (the suite's
    test_fuse_custom_pattern) or first (test_fusion_pattern_with_multiple_inputs)."""

    def __init__(self, add, conv_first):
        super().__init__()
        self.conv = nn.Conv2d(3, 3, 3)
        self.bn = nn.BatchNorm2d(3)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3)
        self.add, self.conv_first = add, conv_first

    def forward(self, x):
        y = self.maxpool(x)
        x = self.bn(self.conv(x))
        return self.relu(self.add(x, y) if self.conv_first else self.add(y, x))


def _structure(gm):
    """Each call_module node: (name, module class, args as node names)."""
    return [(n.name, type(gm.get_submodule(n.target)).__name__,
             tuple(a.name if isinstance(a, torch.fx.Node) else a for a in n.args))
            for n in gm.graph.nodes if n.op == "call_module"]


def _conv_alone(is_qat, relu, add_pattern):
    bn, conv = next(p for p in add_pattern[1:] if isinstance(p, tuple))
    return conv


def _residual_config(add, conv_first):
    if conv_first:  # with getters: the fused conv takes the residual too
        cfg = nested_pattern_config((nn.ReLU, (add, (nn.BatchNorm2d, nn.Conv2d),
                                               MatchAllNode)))
        cfg = cfg.set_fuser_method(_conv_alone)._set_root_node_getter(root_node_getter) \
            ._set_extra_inputs_getter(extra_inputs_getter)
    else:  # PyTorch's default root (the conv: the last arg, followed down), no extra input
        cfg = nested_pattern_config((nn.ReLU, (add, MatchAllNode, (nn.BatchNorm2d,
                                                                   nn.Conv2d))))
        cfg = cfg.set_fuser_method(_conv_alone)
    return BackendConfig().set_backend_pattern_config(cfg)


@pytest.mark.parametrize("add, conv_first", [(torch.add, False), (operator.add, False),
                                             (torch.add, True)])
def test_fuse_fx_with_a_users_fuser_gives_pytorchs_fused_model(add, conv_first):
    model = ConvBnResidualReLU(add, conv_first).eval()
    theirs = torch_qfx.fuse_fx(copy.deepcopy(model),
                               backend_config=_residual_config(add, conv_first))
    ours = qfx.fuse_fx(copy.deepcopy(model), backend_config=_residual_config(add, conv_first))
    assert _structure(ours) == _structure(theirs)
    assert len(next(n for n in ours.graph.nodes if n.target == "conv").args) == \
        (2 if conv_first else 1)
    assert type(ours.conv) is nn.Conv2d and not hasattr(ours, "bn") and \
        not hasattr(ours, "relu")
    assert torch.equal(ours.conv.weight, model.conv.weight)


def test_a_match_all_node_input_fused_by_another_users_fuser_as_pytorch():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.relu1 = nn.Conv2d(3, 3, 3), nn.ReLU()
            self.conv2, self.relu2 = nn.Conv2d(3, 3, 3), nn.ReLU()

        def forward(self, x):
            y = self.relu1(self.conv1(x))
            return self.relu2(torch.add(self.conv2(x), y))

    def fuse_conv_relu(is_qat, relu, conv):
        return conv

    def fuse_conv_res_relu(is_qat, relu, add_pattern):
        _, conv, _ = add_pattern
        return conv

    def config():
        conv_relu = nested_pattern_config((nn.ReLU, nn.Conv2d)).set_fuser_method(fuse_conv_relu)
        residual = nested_pattern_config((nn.ReLU, (torch.add, nn.Conv2d, MatchAllNode))) \
            .set_fuser_method(fuse_conv_res_relu) \
            ._set_root_node_getter(lambda p: p[1][1]) \
            ._set_extra_inputs_getter(lambda p: [p[1][2]])
        return BackendConfig().set_backend_pattern_config(conv_relu) \
            .set_backend_pattern_config(residual)

    model = M().eval()
    theirs = torch_qfx.fuse_fx(copy.deepcopy(model), backend_config=config())
    ours = qfx.fuse_fx(copy.deepcopy(model), backend_config=config())
    assert _structure(ours) == _structure(theirs)
    assert [n for n in ("relu1", "relu2") if hasattr(ours, n)] == []


def test_a_user_fused_module_fuselage_has_no_fusion_for_is_refused_by_prepare_only():
    class ConvSigmoid(_FusedModule):
        def __init__(self, conv, sigmoid):
            super().__init__(conv, sigmoid)

    def fuse_conv_sigmoid(is_qat, sigmoid, conv):
        return ConvSigmoid(conv, sigmoid)

    def config():
        fusion = nested_pattern_config((nn.Sigmoid, nn.Conv2d)) \
            .set_fuser_method(fuse_conv_sigmoid).set_dtype_configs([int8])
        fused = BackendPatternConfig(ConvSigmoid).set_dtype_configs([int8]) \
            .set_root_module(nn.Conv2d).set_reference_quantized_module(nnqr.Conv2d)
        return get_qnnpack_backend_config().set_backend_pattern_config(fusion) \
            .set_backend_pattern_config(fused)

    model = nn.Sequential(nn.Conv2d(3, 3, 3), nn.Sigmoid()).eval()
    fused = qfx.fuse_fx(copy.deepcopy(model), backend_config=config())
    assert type(fused.get_submodule("0")) is ConvSigmoid  # as PyTorch's fuse_fx
    assert type(torch_qfx.fuse_fx(copy.deepcopy(model), backend_config=config())
                .get_submodule("0")) is ConvSigmoid
    with pytest.raises(ConfigTranslationError, match="node '_0'.*ConvSigmoid.*cannot be "
                                                     "quantized by fuselage"):
        qfx.prepare_fx(model, get_default_qconfig_mapping("qnnpack"),
                       (torch.randn(1, 3, 8, 8),), backend_config=config())


def test_prepare_qat_fx_refuses_a_users_fuser_naming_the_node():
    from torch.ao.quantization import get_default_qat_qconfig_mapping

    with pytest.raises(ConfigTranslationError, match="prepare_qat_fx: the user's fuser of "
                                                     "node.*conv.*quantization-aware"):
        qfx.prepare_qat_fx(residual_model(0).train(), get_default_qat_qconfig_mapping("qnnpack"),
                           (torch.randn(1, 3, 16, 16),), backend_config=seed_backend_config())
