"""Quantization-aware training on torch.export graphs (issue 38 item 2), checked against
torchao's own QAT flow.

The same exported training-mode model (seed), data and SGD optimizer; one copy prepared by
torchao's prepare_qat_pt2e with X86InductorQuantizer's QAT config
(get_default_x86_inductor_quantization_config(is_qat=True)), one by
fuselage.pt2e.prepare_qat_pt2e (and by torchao's prepare_qat_pt2e with
fuselage.pt2e.Quantizer(is_qat=True)). The fake-quantizes are the same classes on the
same values, so 20 training steps give the same losses (1e-5 relative); convert_pt2e then
gives the same quantize / dequantize nodes with the same parameters and outputs within one
quantization step. Skipped without torchao (PyTorch 1.13)."""

import copy

import pytest
import torch
import torch.nn as nn

pytest.importorskip("torchao.quantization.pt2e.quantize_pt2e")
import fuselage.pt2e  # noqa: E402  (after the skip: it needs PyTorch 2)
from fuselage.errors import ConfigTranslationError  # noqa: E402

torch.set_num_threads(1)

STEPS = 20
_Q = torch.ops.quantized_decomposed


class ConvBnReLUAdd(nn.Module):
    """conv-bn-relu, then conv-bn + the first block's output, relu; pool, linear."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = nn.BatchNorm2d(8)
        self.r1 = nn.ReLU()
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)
        self.b2 = nn.BatchNorm2d(8)
        self.r2 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        y = self.r1(self.b1(self.c1(x)))
        z = self.r2(self.b2(self.c2(y)) + y)
        return self.fc(torch.flatten(self.pool(z), 1))


class ConvBnReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU()
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.head(self.relu(self.bn(self.conv(x))))


def _torchao_x86_qat():
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq
    return xiq.X86InductorQuantizer().set_global(
        xiq.get_default_x86_inductor_quantization_config(is_qat=True))


def _fake_quantizes(prepared):
    """(the value each fake-quantize reads, its class, its observer's class), in order."""
    found = []
    for node in prepared.graph.nodes:
        if node.op == "call_module":
            module = prepared.get_submodule(node.target)
            observer = getattr(module, "activation_post_process", None)
            found.append((node.args[0].name, type(module).__name__, type(observer).__name__))
    return found


def _train(prepared, batches, targets):
    optimizer = torch.optim.SGD(prepared.parameters(), lr=0.02, momentum=0.9)
    losses = []
    for x, t in zip(batches, targets):
        loss = nn.functional.mse_loss(prepared(x), t)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _q_dq(reference):
    """Every quantize / dequantize node: (op, scale, zero point) in graph order, the
    scales of per-channel ops as their tensors' values."""
    found = []
    for node in reference.graph.nodes:
        if node.op != "call_function" or getattr(node.target, "namespace", None) != \
                "quantized_decomposed":
            continue
        scale = node.args[1]
        if isinstance(scale, torch.fx.Node):
            scale = getattr(reference, scale.target).tolist()
        zero = node.args[2]
        if isinstance(zero, torch.fx.Node):
            zero = getattr(reference, zero.target).tolist()
        found.append((str(node.target), scale, zero))
    return found


def _check_against_torchao(model, shape, outputs, prepare_ours, seed=0, convert=True):
    """The placement and losses; with `convert`, the converted models too (torchao's
    convert_pt2e takes about a minute per model here: it exports its conv-bn patterns)."""
    from torchao.quantization.pt2e import move_exported_model_to_eval
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_qat_pt2e
    generator = torch.Generator().manual_seed(seed)
    batches = [torch.randn(*shape, generator=generator) for _ in range(STEPS)]
    targets = [torch.randn(shape[0], *outputs, generator=generator) for _ in range(STEPS)]
    exported = torch.export.export(model.train(), (batches[0],)).module()
    theirs = prepare_qat_pt2e(copy.deepcopy(exported), _torchao_x86_qat())
    ours = prepare_ours(copy.deepcopy(exported))

    assert _fake_quantizes(ours) == _fake_quantizes(theirs)
    assert len(_fake_quantizes(ours)) >= 4
    their_losses = _train(theirs, batches, targets)
    our_losses = _train(ours, batches, targets)
    for a, b in zip(our_losses, their_losses):
        assert abs(a - b) <= 1e-5 * abs(b), (our_losses, their_losses)
    if not convert:
        return ours, None

    x = torch.randn(*shape, generator=generator)
    converted = []
    for prepared, convert in ((theirs, convert_pt2e), (ours, fuselage.pt2e.convert_pt2e)):
        move_exported_model_to_eval(prepared)
        converted.append(convert(prepared))
    want, got = (_q_dq(c) for c in converted)
    assert [op for op, _, _ in got] == [op for op, _, _ in want]
    assert _Q.quantize_per_tensor.default in {n.target for n in converted[1].graph.nodes}
    for (_, our_scale, our_zero), (_, their_scale, their_zero) in zip(got, want):
        assert our_zero == their_zero
        assert our_scale == pytest.approx(their_scale, rel=1e-5)
    step = max(s for op, s, _ in want if "quantize_per_tensor" in op and isinstance(s, float))
    with torch.no_grad():
        error = (converted[1](x) - converted[0](x)).abs().max().item()
    assert error <= step, (error, step)
    return ours, converted[1]


def test_prepare_qat_pt2e_trains_and_converts_as_torchaos_qat_flow():
    torch.manual_seed(0)
    model = ConvBnReLUAdd()
    ours, converted = _check_against_torchao(
        model, (4, 3, 8, 8), (4,), lambda gm: fuselage.pt2e.prepare_qat_pt2e(gm, "x86"))
    # The batch norms trained (their running statistics moved) and were folded by convert.
    means = [v for k, v in ours.state_dict().items() if k.endswith("running_mean")]
    assert len(means) == 2 and all(m.abs().sum() > 0 for m in means)
    assert not any("batch_norm" in str(n.target) for n in converted.graph.nodes)


def test_fuselages_quantizer_under_torchaos_prepare_qat_pt2e_as_x86_inductor_quantizer():
    from torchao.quantization.pt2e.quantize_pt2e import prepare_qat_pt2e
    torch.manual_seed(0)
    _check_against_torchao(ConvBnReLUAdd(), (4, 3, 8, 8), (4,),
                           lambda gm: prepare_qat_pt2e(gm, fuselage.pt2e.Quantizer(is_qat=True)),
                           seed=1, convert=False)


def test_a_conv_bn_relu_read_by_the_graph_output_is_fake_quantized_as_in_torchao():
    # X86InductorQuantizer's QAT patterns annotate a conv-bn-relu's output whatever reads
    # it (its post-training ones only for int8 readers).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
    ours, _ = _check_against_torchao(model, (4, 3, 8, 8), (8, 8, 8),
                                     lambda gm: fuselage.pt2e.prepare_qat_pt2e(gm, "x86"),
                                     seed=3, convert=False)
    assert len(_fake_quantizes(ours)) >= 3  # input, weight, the relu's output


def test_prepare_qat_pt2e_takes_x86_inductor_quantizer_with_its_qat_config():
    torch.manual_seed(0)
    _check_against_torchao(ConvBnReLU(), (4, 3, 8, 8), (4, 8, 8),
                           lambda gm: fuselage.pt2e.prepare_qat_pt2e(gm, _torchao_x86_qat()),
                           seed=2, convert=False)


def test_what_is_not_supported_is_named():
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as xiq
    x = torch.randn(2, 3, 8, 8)
    torch.manual_seed(0)
    model = ConvBnReLU()
    exported = torch.export.export(model.eval(), (x,)).module()
    with pytest.raises(ConfigTranslationError, match="use fuselage.pt2e.prepare_qat_pt2e"):
        fuselage.pt2e.prepare_pt2e(exported, _torchao_x86_qat())
    with pytest.raises(ConfigTranslationError, match="use fuselage.pt2e.prepare_qat_pt2e"):
        fuselage.pt2e.prepare_pt2e(exported, fuselage.pt2e.Quantizer(is_qat=True))
    post_training = xiq.X86InductorQuantizer().set_global(
        xiq.get_default_x86_inductor_quantization_config())
    training = torch.export.export(model.train(), (x,)).module()
    with pytest.raises(ConfigTranslationError, match="has a post-training config"):
        fuselage.pt2e.prepare_qat_pt2e(copy.deepcopy(training), post_training)
    with pytest.raises(ConfigTranslationError, match="xnnpack"):
        fuselage.pt2e.Quantizer("xnnpack", is_qat=True)

    class LoneBatchNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm2d(3)
            self.conv = nn.Conv2d(3, 4, 1)

        def forward(self, x):
            return self.conv(self.bn(x))

    lone = torch.export.export(LoneBatchNorm().train(), (x,)).module()
    with pytest.raises(ConfigTranslationError, match="batch norm '.*' is in training mode"):
        fuselage.pt2e.prepare_qat_pt2e(lone, "x86")
