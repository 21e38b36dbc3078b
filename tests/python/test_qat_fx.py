"""Quantization-aware training through fuselage.quantize_fx (issue 38 item 1), checked
against PyTorch itself.

The same model (seed), data and SGD optimizer; one copy prepared by fuselage's
prepare_qat_fx, one by PyTorch's. Both hold PyTorch's fake-quantize and QAT modules in the
same places, so 20 training steps give the same losses (to 1e-5, relative), and the two
convert_fx results give the same outputs within one step of the output's scale. On a
conv-bn-relu + residual-add model for the qnnpack and fbgemm mappings, a model of more
ops, and torchvision's resnet18 and mobilenet_v2 (its dropout drawing the same masks for
both).
"""
import copy

import pytest
import torch
import torch.ao.nn.intrinsic as nni
import torch.nn as nn
import torchvision
from torch.ao.quantization import QConfigMapping, get_default_qat_qconfig_mapping
from torch.ao.quantization.backend_config import (get_fbgemm_backend_config,
                                                  get_qnnpack_backend_config)
from torch.ao.quantization.fake_quantize import FakeQuantizeBase
from torch.ao.quantization.quantize_fx import convert_fx as torch_convert_fx
from torch.ao.quantization.quantize_fx import prepare_qat_fx as torch_prepare_qat_fx

from fuselage.errors import ConfigTranslationError
from fuselage.quantize_fx import convert_fx, convert_to_reference_fx, prepare_fx, prepare_qat_fx
from conftest import SmallResidual, x86_engine

torch.set_num_threads(1)

STEPS = 20

BACKENDS = {
    "qnnpack": (get_qnnpack_backend_config, lambda: "qnnpack"),
    "fbgemm": (get_fbgemm_backend_config, x86_engine),
}


@pytest.fixture
def engine():
    saved = torch.backends.quantized.engine

    def use(name):
        torch.backends.quantized.engine = name

    yield use
    torch.backends.quantized.engine = saved


def _called(gm):
    """The graph as (what each node runs) in order: a module's class, a function, a
    method; fake-quantizes by class, whatever their names."""
    out = []
    for node in gm.graph.nodes:
        if node.op == "call_module":
            out.append(type(gm.get_submodule(node.target)).__name__)
        elif node.op in ("call_function", "call_method"):
            out.append(getattr(node.target, "__name__", str(node.target)))
    return out


def _weighted(gm):
    return {name: type(m) for name, m in gm.named_modules() if hasattr(m, "weight_fake_quant")}


def _freeze(prepared):
    """What QAT recipes do late in training: observers off, batch-norm statistics frozen."""
    prepared.apply(torch.ao.quantization.disable_observer)
    for module in prepared.modules():
        if hasattr(module, "freeze_bn_stats"):
            module.freeze_bn_stats()


def _train_both(model, mapping, backend_config, example, batches, targets, freeze_at=None):
    ours = prepare_qat_fx(copy.deepcopy(model), mapping, example, backend_config=backend_config)
    theirs = torch_prepare_qat_fx(copy.deepcopy(model), mapping, example,
                                  backend_config=backend_config)
    losses = []
    for prepared in (ours, theirs):
        optimizer = torch.optim.SGD(prepared.parameters(), lr=0.02, momentum=0.9)
        run = []
        for i, (x, t) in enumerate(zip(batches, targets)):
            if i == freeze_at:
                _freeze(prepared)
            torch.manual_seed(i)  # the same dropout masks for both
            loss = nn.functional.mse_loss(prepared(x), t)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            run.append(loss.item())
        losses.append(run)
    return ours, theirs, losses


def _output_step(prepared):
    """The scale of the fake-quantize on the (one) output of PyTorch's prepared model."""
    output = next(n for n in prepared.graph.nodes if n.op == "output")
    return float(prepared.get_submodule(output.args[0].target).scale)


def _check_against_pytorch(model, mapping, backend_config, shape, outputs, seed=0,
                           freeze_at=None):
    generator = torch.Generator().manual_seed(seed)
    batches = [torch.randn(*shape, generator=generator) for _ in range(STEPS)]
    targets = [torch.randn(shape[0], outputs, generator=generator) for _ in range(STEPS)]
    ours, theirs, (our_losses, their_losses) = _train_both(
        model.train(), mapping, backend_config, (batches[0],), batches, targets, freeze_at)

    # PyTorch's modules in PyTorch's places.
    assert _called(ours) == _called(theirs)
    assert _weighted(ours) == _weighted(theirs)
    assert sum(isinstance(m, FakeQuantizeBase) for m in ours.modules()) == \
        sum(isinstance(m, FakeQuantizeBase) for m in theirs.modules())
    for a, b in zip(our_losses, their_losses):
        assert abs(a - b) <= 1e-5 * abs(b), (our_losses, their_losses)

    x = torch.randn(*shape, generator=generator)
    step = _output_step(theirs)
    converted = convert_fx(ours.eval())
    reference = torch_convert_fx(theirs.eval())
    assert not any(isinstance(m, FakeQuantizeBase) or hasattr(m, "weight_fake_quant")
                   for m in converted.modules())
    with torch.no_grad():
        error = (converted(x) - reference(x)).abs().max().item()
    assert error <= step * 1.001, (error, step)
    return ours, converted


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_qat_on_a_residual_block_trains_and_converts_as_pytorch(backend, engine):
    config, engine_name = BACKENDS[backend]
    engine(engine_name())
    torch.manual_seed(0)
    ours, converted = _check_against_pytorch(
        SmallResidual(), get_default_qat_qconfig_mapping(backend), config(), (4, 3, 8, 8), 4,
        freeze_at=STEPS // 2)
    # Batch norms kept, and they trained until frozen: conv-bn-relu is nniqat.ConvBnReLU2d;
    # the converted model has it folded.
    assert type(ours.conv1).__name__ == "ConvBnReLU2d" and hasattr(ours.conv1, "bn")
    assert ours.conv1.bn.num_batches_tracked.item() == STEPS // 2
    assert type(converted.conv1).__name__ == "ConvReLU2d"  # nniq.ConvReLU2d
    assert "quantized" in type(converted.conv1).__module__


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_qat_torchvision_as_pytorch(name, engine):
    if name != "resnet18" and torch.__version__ < "2":
        pytest.skip("the PyTorch 1.13 suite keeps resnet18 only (its prepare is slow)")
    engine("qnnpack")
    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None, num_classes=10)
    _check_against_pytorch(model, get_default_qat_qconfig_mapping("qnnpack"),
                           get_qnnpack_backend_config(), (1, 3, 64, 64), 10)


def test_convert_leaves_the_trained_model_as_it_was_and_reference_has_qat_qparams(engine):
    engine("qnnpack")
    torch.manual_seed(0)
    mapping = get_default_qat_qconfig_mapping("qnnpack")
    config = get_qnnpack_backend_config()
    x = torch.randn(2, 3, 8, 8)
    prepared = prepare_qat_fx(SmallResidual().train(), mapping, (x,), backend_config=config)
    prepared(x)
    before = {k: v.clone() for k, v in prepared.state_dict().items()}
    reference = convert_to_reference_fx(prepared.eval(), qconfig_mapping=mapping,
                                        backend_config=config)
    assert type(prepared.conv1).__name__ == "ConvBnReLU2d"
    after = prepared.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    # The weight qparams are the weight fake-quantize's after one more look at the folded
    # weight (PyTorch's convert), not a fresh observer's.
    fake = copy.deepcopy(prepared.fc.weight_fake_quant)
    fake(prepared.fc.to_float().weight)
    scale, _ = fake.calculate_qparams()
    assert reference.fc.weight_scale.item() == pytest.approx(scale.item(), rel=1e-7)


def test_a_qat_qconfig_in_prepare_fx_gives_fake_quantizes_and_no_qat_modules_as_pytorch():
    # Was refused (pointing to prepare_qat_fx); PyTorch's prepare_fx inserts the
    # fake-quantizes and keeps the (fused, folded) modules as for post-training.
    from torch.ao.quantization.quantize_fx import prepare_fx as torch_prepare_fx
    model = SmallResidual().eval()
    example = (torch.randn(1, 3, 8, 8),)
    mapping = get_default_qat_qconfig_mapping("qnnpack")
    backend = get_qnnpack_backend_config()
    got = prepare_fx(copy.deepcopy(model), mapping, example, backend_config=backend)
    want = torch_prepare_fx(copy.deepcopy(model), mapping, example, backend_config=backend)

    def kinds(gm):
        return sorted(type(gm.get_submodule(n.target)).__name__
                      for n in gm.graph.nodes if n.op == "call_module")

    assert kinds(got) == kinds(want)
    assert any(isinstance(m, FakeQuantizeBase) for m in got.modules())


def test_qat_module_swap_follows_the_mapping_by_name():
    """A module_name entry set to None keeps that module float, as PyTorch's swap does."""
    mapping = get_default_qat_qconfig_mapping("qnnpack").set_module_name("fc", None)
    x = torch.randn(2, 3, 8, 8)
    ours = prepare_qat_fx(SmallResidual().train(), mapping, (x,),
                          backend_config=get_qnnpack_backend_config())
    theirs = torch_prepare_qat_fx(SmallResidual().train(), mapping, (x,),
                                  backend_config=get_qnnpack_backend_config())
    assert type(ours.fc) is nn.Linear and type(theirs.fc) is nn.Linear
    assert _weighted(ours) == _weighted(theirs)


class Ops(nn.Module):
    """conv-bn-relu (functional relu), conv + hardswish, a scalar mul, cat, conv-bn
    without bias, max pool, mul, adaptive pool, flatten, linear-relu (functional), linear."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = nn.BatchNorm2d(8)
        self.c2 = nn.Conv2d(8, 8, 1)
        self.act = nn.Hardswish()
        self.c3 = nn.Conv2d(16, 8, 3, padding=1, bias=False)
        self.b3 = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.lin = nn.Linear(8, 16)
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        y = torch.relu(self.b1(self.c1(x)))
        u = torch.cat([self.act(self.c2(y)), y * 0.5], 1)
        u = self.pool(self.b3(self.c3(u)))
        u = u * u
        v = torch.flatten(nn.functional.adaptive_avg_pool2d(u, 1), 1)
        return self.fc(nn.functional.relu(self.lin(v)))


def test_qat_on_more_ops_as_pytorch(engine):
    engine("qnnpack")
    torch.manual_seed(0)
    ours, _ = _check_against_pytorch(Ops(), get_default_qat_qconfig_mapping("qnnpack"),
                                     get_qnnpack_backend_config(), (4, 3, 8, 8), 4)
    assert type(ours.lin).__name__ == "LinearReLU" and type(ours.c3).__name__ == "ConvBn2d"


def test_a_module_called_twice_is_refused():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 1)

        def forward(self, x):
            return self.conv(self.conv(x))

    with pytest.raises(ConfigTranslationError, match="'conv' is called 2 times"):
        prepare_qat_fx(Twice().train(), get_default_qat_qconfig_mapping("qnnpack"),
                       (torch.randn(1, 3, 4, 4),), backend_config=get_qnnpack_backend_config())


def test_the_qat_translation():
    """The mapping's fake-quantizes are written as the observers they wrap; PyTorch's
    batch-norm fusers keep the batch norm (nni.ConvBnReLU2d), not fold it."""
    from fuselage._translate import backend_config_to_text, qconfig_mapping_to_text

    text = qconfig_mapping_to_text(get_default_qat_qconfig_mapping("fbgemm"), is_qat=True)
    assert 'weight { kind: "MovingAveragePerChannelMinMaxObserver"' in text
    assert 'kind: "FixedQParamsObserver" scale: 0.0078125 zero_point: 128' in text
    config = backend_config_to_text(get_qnnpack_backend_config(), is_qat=True)
    assert 'fused_module: "nni.ConvBnReLU2d"' in config
    assert 'fused_module: "nni.LinearBn1d"' in config
    assert "FOLD_BN_THEN_WRAP" not in config
    assert "FOLD_BN_THEN_WRAP" in backend_config_to_text(get_qnnpack_backend_config())


class Functional(nn.Module):
    """linear-relu, then a functional linear of the model's own parameters."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.w = nn.Parameter(torch.randn(4, 8) * 0.3)
        self.b = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return nn.functional.linear(torch.relu(self.fc(x)), self.w, self.b)


def test_qat_of_a_functional_linear_trains_its_parameters_as_pytorch(engine):
    """The get_attr weight gets the mapping's weight fake-quantize, and the weight and bias
    stay parameters, so SGD trains them as in PyTorch."""
    engine("qnnpack")
    torch.manual_seed(0)
    ours, _ = _check_against_pytorch(Functional(), get_default_qat_qconfig_mapping("qnnpack"),
                                     get_qnnpack_backend_config(), (4, 8), 4)
    assert {n for n, _ in ours.named_parameters()} >= {"w", "b"}


# The user's own conv-bn-add-relu pattern (fuselage.fusers, as in tests/python/
# test_quantize_fx.py), which PyTorch cannot fuse into one module: its QAT form keeps the
# batch norm training. The independent expectation is the same model built by hand from
# PyTorch's own QAT modules: nniqat.ConvBn2d, then the add and relu, and PyTorch's
# fake-quantizes where fuselage's prepare observes (the input, the stem's output, the fused
# op's output).

def _conv_bn_add_relu_config(relu=True):
    """The qnnpack config with the user's (ReLU, (add, (BatchNorm2d, Conv2d), extra))
    entry, or (add, (BatchNorm2d, Conv2d), extra) without `relu`."""
    from torch.ao.quantization.backend_config import DTypeConfig
    from torch.ao.quantization.fx.match_utils import MatchAllNode
    import fuselage.fusers
    from conftest import nested_pattern_config

    add = (torch.add, (nn.BatchNorm2d, nn.Conv2d), MatchAllNode)
    if relu:
        pattern, fuser = (nn.ReLU, add), fuselage.fusers.fuse_conv_bn_add_relu
    else:
        pattern, fuser = add, fuselage.fusers.fuse_conv_bn_add

    def root(pattern):
        return (pattern[1] if relu else pattern)[1][1]

    def extra(pattern):
        return [(pattern[1] if relu else pattern)[2]]

    int8 = DTypeConfig(input_dtype=torch.quint8, output_dtype=torch.quint8,
                       weight_dtype=torch.qint8, bias_dtype=torch.float)
    cfg = nested_pattern_config(pattern).set_fuser_method(fuser) \
        ._set_root_node_getter(root)._set_extra_inputs_getter(extra) \
        .set_dtype_configs([int8])
    return get_qnnpack_backend_config().set_backend_pattern_config(cfg)


class StemResidual(nn.Module):
    def __init__(self, relu=True):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.conv = nn.Conv2d(8, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU() if relu else None

    def forward(self, x):
        identity = self.stem(x)
        y = torch.add(self.bn(self.conv(identity)), identity)
        return self.relu(y) if self.relu is not None else y


class StemResidualByHand(nn.Module):
    """StemResidual's QAT model from PyTorch's classes: fake-quantized input, nnqat.Conv2d
    stem and its output fake-quantized, nniqat.ConvBn2d + add + relu, output
    fake-quantized."""

    def __init__(self, model, qconfig, relu=True):
        super().__init__()
        self.relu = relu
        try:
            import torch.ao.nn.intrinsic.qat as nniqat
            import torch.ao.nn.qat as nnqat
        except ImportError:  # PyTorch 1.13
            import torch.nn.intrinsic.qat as nniqat
            import torch.nn.qat as nnqat
        model = copy.deepcopy(model)
        model.stem.qconfig = qconfig
        fused = nni.ConvBn2d(model.conv, model.bn)
        fused.qconfig = qconfig
        self.input_fq = qconfig.activation()
        self.stem = nnqat.Conv2d.from_float(model.stem)
        self.stem_fq = qconfig.activation()
        self.conv_bn = nniqat.ConvBn2d.from_float(fused)
        self.output_fq = qconfig.activation()

    def forward(self, x):
        identity = self.stem_fq(self.stem(self.input_fq(x)))
        y = self.conv_bn(identity) + identity
        return self.output_fq(torch.relu(y) if self.relu else y)


def _train(model, batches, targets, freeze_at):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)
    losses = []
    for i, (x, t) in enumerate(zip(batches, targets)):
        if i == freeze_at:
            _freeze(model)
        loss = nn.functional.mse_loss(model(x), t)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("relu", [True, False])
def test_the_users_conv_bn_add_relu_trains_its_batch_norm_as_pytorchs_conv_bn_by_hand(
        relu, engine):
    import fuselage.nn
    import fuselage.nn.quantized
    engine("qnnpack")
    torch.manual_seed(0)
    model = StemResidual(relu).train()
    qat_type = fuselage.nn.qat.ConvBnAddReLU2d if relu else fuselage.nn.qat.ConvBnAdd2d
    native_type = fuselage.nn.quantized.ConvAddReLU2d if relu else \
        fuselage.nn.quantized.ConvAdd2d
    mapping = get_default_qat_qconfig_mapping("qnnpack")
    generator = torch.Generator().manual_seed(3)
    shape = (4, 3, 8, 8)
    batches = [torch.randn(*shape, generator=generator) for _ in range(STEPS)]
    targets = [torch.randn(4, 8, 8, 8, generator=generator) for _ in range(STEPS)]
    ours = prepare_qat_fx(copy.deepcopy(model), mapping, (batches[0],),
                          backend_config=_conv_bn_add_relu_config(relu))
    by_hand = StemResidualByHand(model, mapping.global_qconfig, relu).train()

    # One QAT module for conv-bn-add-relu, the batch norm inside it training.
    fused = [m for m in ours.modules() if type(m) is qat_type]
    assert len(fused) == 1 and fused[0].bn.training
    assert sum(isinstance(m, FakeQuantizeBase) for m in ours.modules()) == 5  # 3 + 2 weights

    our_losses = _train(ours, batches, targets, STEPS // 2)
    their_losses = _train(by_hand, batches, targets, STEPS // 2)
    for a, b in zip(our_losses, their_losses):
        assert abs(a - b) <= 1e-5 * abs(b), (our_losses, their_losses)
    # The batch norm trained (its statistics until frozen halfway, its affine parameters
    # throughout) as PyTorch's did.
    assert fused[0].bn.num_batches_tracked.item() == STEPS // 2
    for name in ("running_mean", "running_var", "weight", "bias"):
        assert torch.allclose(getattr(fused[0].bn, name), getattr(by_hand.conv_bn.bn, name),
                              rtol=1e-5, atol=1e-6), name
    assert not torch.equal(fused[0].bn.running_mean, model.bn.running_mean)

    # Converted: batch norm folded, conv-add-relu one quantized op with both inputs
    # quantized, within one output step of PyTorch's fake-quantized model.
    converted = convert_fx(ours.eval())
    natives = [n for n in converted.graph.nodes if n.op == "call_module" and type(
        converted.get_submodule(n.target)) is native_type]
    assert len(natives) == 1
    assert all(getattr(a, "target", None) != "dequantize" for a in natives[0].args)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in converted.modules())
    by_hand.eval()
    step = float(by_hand.output_fq.scale)
    x = torch.randn(*shape, generator=generator)
    with torch.no_grad():
        error = (converted(x) - by_hand(x)).abs().max().item()
    assert error <= step * 1.001, (error, step)


def test_conv_add_without_batch_norm_has_no_qat_form_and_says_so():
    from torch.ao.quantization.fx.match_utils import MatchAllNode
    import fuselage.fusers
    from conftest import nested_pattern_config
    cfg = nested_pattern_config((nn.ReLU, (torch.add, nn.Conv2d, MatchAllNode))) \
        .set_fuser_method(fuselage.fusers.fuse_conv_add_relu)
    config = get_qnnpack_backend_config().set_backend_pattern_config(cfg)
    with pytest.raises(ConfigTranslationError, match="fuse_conv_add_relu has no QAT form"):
        prepare_qat_fx(StemResidual().train(), get_default_qat_qconfig_mapping("qnnpack"),
                       (torch.randn(1, 3, 8, 8),), backend_config=config)
