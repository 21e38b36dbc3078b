"""fuselage.nn / fuselage.nn.quantized / fuselage.fusers: the conv-add(-relu) modules
PyTorch 1.13 lacks. The float modules equal the unfused float ops; the quantized ones give
the integer values of fuselage's own kernel (`fuselage run`, the C++ interpreter) bit for
bit, ties and saturation included; to_torch maps fuselage's nni/nniq types to them and
export maps them back."""

import copy
import operator
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn
from torch.ao.quantization.backend_config import BackendConfig, BackendPatternConfig
from torch.ao.quantization.fx.match_utils import MatchAllNode
from torch.ao.quantization.quantize_fx import fuse_fx

import fuselage
import fuselage.fusers as fusers
import fuselage.nn as fnn
import fuselage.nn.quantized as fnnq
from conftest import REPO, nested_pattern_config
from fuselage.errors import ModuleError


def _conv(seed, cin=4, cout=6, **kw):
    torch.manual_seed(seed)
    return nn.Conv2d(cin, cout, 3, padding=1, **kw).eval()


def _bn(seed, c=6):
    g = torch.Generator().manual_seed(seed)
    bn = nn.BatchNorm2d(c).eval()
    bn.running_mean.copy_(torch.randn(c, generator=g))
    bn.running_var.copy_(torch.rand(c, generator=g) + 0.5)
    bn.weight.data.copy_(torch.rand(c, generator=g) + 0.5)
    bn.bias.data.copy_(torch.randn(c, generator=g))
    return bn


# ---- float modules and fusers -----------------------------------------------------------


def test_float_modules_equal_the_unfused_ops():
    conv = _conv(0)
    x, e = torch.randn(2, 4, 7, 7), torch.randn(2, 6, 7, 7)
    with torch.no_grad():
        assert torch.allclose(fnn.ConvAddReLU2d(conv, nn.ReLU())(x, e),
                              torch.relu(conv(x) + e), atol=1e-5)
        assert torch.allclose(fnn.ConvAdd2d(conv)(x, e), conv(x) + e, atol=1e-5)
    assert [n for n, _ in fnn.ConvAddReLU2d(conv, nn.ReLU()).named_children()] == ["0", "1"]


def test_fusers_fold_batch_norm_as_pytorch_does():
    conv, bn = _conv(1), _bn(2)
    x, e = torch.randn(1, 4, 5, 5), torch.randn(1, 6, 5, 5)
    with torch.no_grad():
        expected = bn(conv(x)) + e
        fused = fusers.fuse_conv_bn_add_relu(False, nn.ReLU(),
                                             (torch.add, (bn, conv), MatchAllNode))
        assert type(fused) is fnn.ConvAddReLU2d
        assert torch.allclose(fused(x, e), torch.relu(expected), atol=1e-5)
        fused = fusers.fuse_conv_bn_add(False, torch.add, MatchAllNode, (bn, conv))  # extra first
        assert type(fused) is fnn.ConvAdd2d
        assert torch.allclose(fused(x, e), expected, atol=1e-5)
        fused = fusers.fuse_conv_add_relu(False, nn.ReLU(), (torch.add, conv, MatchAllNode))
        assert torch.allclose(fused(x, e), torch.relu(conv(x) + e), atol=1e-5)
        fused = fusers.fuse_conv_add(False, torch.add, conv, MatchAllNode)
        assert torch.allclose(fused(x, e), conv(x) + e, atol=1e-5)
        fused = fusers.fuse_conv_add(False, operator.add, MatchAllNode, conv)  # `y + conv(x)`
        assert torch.allclose(fused(x, e), conv(x) + e, atol=1e-5)


def test_the_qat_fusers_keep_the_batch_norm():
    # is_qat=True (prepare_qat_fx) keeps the batch norm, as PyTorch's fuse_conv_bn does,
    # for fuselage.nn.qat to train it.
    conv, bn = _conv(1), _bn(2)
    fused = fusers.fuse_conv_bn_add_relu(True, nn.ReLU(), (torch.add, (bn, conv), MatchAllNode))
    assert type(fused) is fnn.ConvBnAddReLU2d and fused[0] is conv and fused[1] is bn
    fused = fusers.fuse_conv_bn_add(True, operator.add, MatchAllNode, (bn, conv))
    assert type(fused) is fnn.ConvBnAdd2d
    bn.eval()
    x = torch.randn(1, 4, 5, 5)
    e = torch.randn_like(conv(x))
    assert torch.allclose(fused(x, e), bn(conv(x)) + e)


def test_fusers_refuse_what_they_cannot_fuse():
    conv, bn = _conv(1), _bn(2)
    with pytest.raises(ModuleError, match="is_qat=True is not supported"):
        fusers.fuse_conv_add_relu(True, nn.ReLU(), (torch.add, conv, MatchAllNode))
    with pytest.raises(ModuleError, match=r"expected one of them to be nn.Conv2d"):
        fusers.fuse_conv_add(False, torch.add, nn.Linear(2, 2), MatchAllNode)
    with pytest.raises(ModuleError, match="expected torch.add or operator.add"):
        fusers.fuse_conv_add(False, torch.mul, conv, MatchAllNode)
    with pytest.raises(ModuleError, match="expected nn.ReLU"):
        fusers.fuse_conv_add_relu(False, nn.ReLU6(), (torch.add, conv, MatchAllNode))
    with pytest.raises(ModuleError, match="child 0 must be an nn.Conv2d"):
        fnn.ConvAdd2d(nn.Linear(2, 2))


class _ConvBnAddReLU(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn, self.relu = _conv(3, 4, 4), _bn(4, 4), nn.ReLU()

    def forward(self, x):
        return self.relu(torch.add(self.bn(self.conv(x)), x))


def test_pytorch_fuse_fx_calls_the_fuser_with_its_signature(cli, tmp_path):
    """The issue's BackendPatternConfig, run by PyTorch's own fuse_fx; the fused
    GraphModule exports as nni.ConvAddReLU2d and runs in fuselage as in torch."""
    def root_node_getter(pattern):
        relu, add_pattern = pattern
        _, bn_pattern, _ = add_pattern
        bn, conv = bn_pattern
        return conv

    def extra_inputs_getter(pattern):
        relu, add_pattern = pattern
        _, bn_pattern, extra_input = add_pattern
        return [extra_input]

    pattern = (nn.ReLU, (torch.add, (nn.BatchNorm2d, nn.Conv2d), MatchAllNode))
    config = nested_pattern_config(pattern).set_fuser_method(fusers.fuse_conv_bn_add_relu) \
        ._set_root_node_getter(root_node_getter)._set_extra_inputs_getter(extra_inputs_getter)
    model = _ConvBnAddReLU().eval()
    backend = BackendConfig("t").set_backend_pattern_config(config)
    fused = fuse_fx(copy.deepcopy(model), backend_config=backend)
    assert type(fused.conv) is fnn.ConvAddReLU2d
    x = torch.randn(2, 4, 6, 6)
    with torch.no_grad():
        assert torch.allclose(fused(x), model(x), atol=1e-5)
    assert [c.module.type for c in fuselage.to_proto(fused).root.children] == ["nni.ConvAddReLU2d"]
    assert torch.allclose(_run_cpp(cli, tmp_path, fused, [x]), model(x), atol=1e-5)


# ---- quantized modules against fuselage's interpreter -----------------------------------


class _QuantizedBlock(nn.Module):
    """quantize both inputs, the quantized fused module, dequantize: a lowered graph."""

    def __init__(self, module, x_qparams, e_qparams, dtype=torch.quint8):
        super().__init__()
        self.block = module
        self.x_qparams, self.e_qparams, self.dtype = x_qparams, e_qparams, dtype

    def forward(self, x, e):
        qx = torch.quantize_per_tensor(x, self.x_qparams[0], self.x_qparams[1], self.dtype)
        qe = torch.quantize_per_tensor(e, self.e_qparams[0], self.e_qparams[1], self.dtype)
        return self.block(qx, qe).dequantize()


def _quantized_module(cls, weight, bias, scale, zero_point, **conv_kw):
    out_c, in_c = weight.shape[0], weight.shape[1] * conv_kw.get("groups", 1)
    module = cls(in_c, out_c, weight.shape[2], bias=bias is not None, **conv_kw)
    module.set_weight_bias(weight, bias)
    module.scale, module.zero_point = float(scale), int(zero_point)
    return module


def _run_cpp(cli, tmp_path, model, inputs):
    path = tmp_path / "model.fsl"
    fuselage.export(model, None, path)
    names = []
    for i, array in enumerate(inputs):
        names.append(str(tmp_path / f"in{i}.npy"))
        np.save(names[-1], array.numpy())
    out = tmp_path / "out.npy"
    result = subprocess.run([cli, "run", str(path), "--input=" + ",".join(names),
                             f"--output={out}"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return torch.from_numpy(np.load(out))


def _int_values(y, scale, zero_point):
    """The quantized ints behind a dequantized output (float32(scale) * float32(q - zp),
    as dequantize computes it: one float per int, so the ints are recovered exactly)."""
    q = torch.round(y.double() / scale) + zero_point
    assert torch.equal(torch.tensor(scale, dtype=torch.float32) * (q - zero_point).float(), y)
    return q.to(torch.int64)


def _per_channel_weight(g, out_c, in_c, zero_points=None):
    scales = torch.rand(out_c, generator=g, dtype=torch.float64) * 0.02 + 0.005
    zps = torch.zeros(out_c, dtype=torch.int64) if zero_points is None else zero_points
    w = torch.randn(out_c, in_c, 3, 3, generator=g) * 0.5
    return torch.quantize_per_channel(w, scales, zps, 0, torch.qint8)


CASES = {
    # name: (module class, weight kind, bias?, conv kwargs)
    "relu_per_channel": (fnnq.ConvAddReLU2d, "per_channel", True, {"padding": 1}),
    "add_per_tensor": (fnnq.ConvAdd2d, "per_tensor", True, {"padding": 1, "stride": 2}),
    "relu_no_bias_groups": (fnnq.ConvAddReLU2d, "per_tensor", False, {"padding": 1, "groups": 2}),
    "add_weight_zero_points": (fnnq.ConvAdd2d, "zero_points", True, {"padding": 0, "dilation": 1}),
    "relu_qint8_dilated": (fnnq.ConvAddReLU2d, "per_channel", True, {"padding": 2, "dilation": 2}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_quantized_modules_equal_fuselage_run_on_random_inputs(cli, tmp_path, case):
    cls, kind, with_bias, kw = CASES[case]
    g = torch.Generator().manual_seed(hash(case) % 1000)
    out_c, in_c = 6, 4 // kw.get("groups", 1)
    if kind == "per_channel":
        weight = _per_channel_weight(g, out_c, in_c)
    elif kind == "zero_points":
        weight = _per_channel_weight(g, out_c, in_c, torch.randint(-3, 4, (out_c,), generator=g))
    else:
        weight = torch.quantize_per_tensor(torch.randn(out_c, in_c, 3, 3, generator=g) * 0.3,
                                           0.01, 0, torch.qint8)
    bias = torch.randn(out_c, generator=g) if with_bias else None
    signed = "qint8" in case  # signed activations: zero points shift by -128
    dtype, shift = (torch.qint8, -128) if signed else (torch.quint8, 0)
    module = _quantized_module(cls, weight, bias, 0.03, 100 + shift, **kw)
    x = torch.randn(2, 4, 9, 9, generator=g) * 2
    with torch.no_grad():
        out_shape = torch.nn.functional.conv2d(x, torch.zeros(out_c, in_c, 3, 3), None,
                                               kw.get("stride", 1), kw.get("padding", 0),
                                               kw.get("dilation", 1), kw.get("groups", 1)).shape
    e = torch.randn(*out_shape, generator=g) * 3  # * 3: some sums saturate at 0 / 255
    model = _QuantizedBlock(module, (0.02, 128 + shift), (0.025, 120 + shift), dtype).eval()
    with torch.no_grad():
        expected = model(x, e)
        assert model.block(torch.quantize_per_tensor(x, 0.02, 128 + shift, dtype),
                           torch.quantize_per_tensor(e, 0.025, 120 + shift, dtype)).dtype == dtype
    got = _run_cpp(cli, tmp_path, model, [x, e])
    q_torch = _int_values(expected, 0.03, 100 + shift)
    q_cpp = _int_values(got, 0.03, 100 + shift)
    assert torch.equal(q_torch, q_cpp), (q_torch != q_cpp).sum()
    low = (100 if cls is fnnq.ConvAddReLU2d else 0) + shift
    assert (q_torch == 255 + shift).any() and (q_torch == low).any()  # both ends saturate


@pytest.mark.parametrize("relu", [True, False])
def test_quantized_modules_round_ties_and_saturate_as_fuselage(cli, tmp_path, relu):
    """Power-of-two scales make every value exact: conv = acc / 32, bias and residual are
    multiples of 1/16 and the output scale 1/16 puts every odd acc exactly on a .5 tie
    (half to even); the large residuals saturate at both ends."""
    g = torch.Generator().manual_seed(7)
    weight = torch._make_per_tensor_quantized_tensor(
        torch.randint(-2, 3, (4, 3, 3, 3), generator=g, dtype=torch.int8), 0.25, 0)
    bias = torch.randint(-16, 17, (4,), generator=g).float() / 16
    cls = fnnq.ConvAddReLU2d if relu else fnnq.ConvAdd2d
    module = _quantized_module(cls, weight, bias, 1 / 16, 128, padding=1)
    x = (torch.randint(96, 160, (3, 3, 6, 6), generator=g).float() - 128) / 8  # exact quint8
    e = (torch.randint(0, 256, (3, 4, 6, 6), generator=g).float() - 128) / 16
    model = _QuantizedBlock(module, (1 / 8, 128), (1 / 16, 128)).eval()
    with torch.no_grad():
        expected = model(x, e)
        # The independent expectation: exact rational arithmetic, round half to even.
        acc = torch.nn.functional.conv2d(x.double() * 8, weight.int_repr().double(), None,
                                         1, 1)
        total = acc / 32 + bias.double().view(1, -1, 1, 1) + e.double()
        if relu:
            total = total.clamp_min(0)
        exact = torch.round(total * 16 + 128).clamp(0, 255).to(torch.int64)
    got = _run_cpp(cli, tmp_path, model, [x, e])
    q_torch, q_cpp = _int_values(expected, 1 / 16, 128), _int_values(got, 1 / 16, 128)
    assert torch.equal(q_torch, exact)
    assert torch.equal(q_torch, q_cpp)
    ties = ((total * 16) - torch.floor(total * 16) == 0.5) & (exact > 0) & (exact < 255)
    assert ties.sum() > 20 and (exact == 255).any() and (exact == (128 if relu else 0)).any()


def test_conv_term_is_rounded_to_float32_before_the_add(cli, tmp_path):
    """The weight scale 0.25 * (1 + 2^-26) makes conv = acc / 32 + d with d below half a
    float32 step of conv, and the residual cancels conv's bulk, so the sum
    sits on a .5 tie (acc odd) plus d. The C++ kernel rounds conv to float32 first, which
    drops d (a tie, rounded half to even); a sum kept in float64 would keep d and round
    every such tie away from it."""
    g = torch.Generator().manual_seed(11)
    weight = torch._make_per_tensor_quantized_tensor(
        torch.randint(-2, 3, (4, 3, 3, 3), generator=g, dtype=torch.int8), 0.25 * (1 + 2 ** -26), 0)
    module = _quantized_module(fnnq.ConvAdd2d, weight, None, 1 / 16, 128, padding=1)
    x = (torch.randint(108, 148, (2, 3, 6, 6), generator=g).float() - 128) / 8
    with torch.no_grad():
        acc = torch.nn.functional.conv2d(x.double() * 8, weight.int_repr().double(), None, 1, 1)
        conv = acc / 32
        # Where the residual can cancel conv within its range, and d is above the float32
        # step of the small sum (|conv| >= 1), so that a float64 sum would keep it.
        keep = (conv.abs() < 7.5) & (conv.abs() >= 1)
        r = torch.randint(-2, 3, acc.shape, generator=g).double() / 16
        e = torch.where(keep, -torch.floor(conv * 16) / 16 + r, r).float().clamp(-8, 127 / 16)
        expected = _QuantizedBlock(module, (1 / 8, 128), (1 / 16, 128)).eval()(x, e)
        # exact: float32(conv) == acc / 32 (d dropped), so total * 16 = acc / 2 + ...
        total = conv + e.double()
        exact = torch.round(total * 16 + 128).clamp(0, 255).to(torch.int64)
    got = _run_cpp(cli, tmp_path, _QuantizedBlock(module, (1 / 8, 128), (1 / 16, 128)).eval(),
                   [x, e])
    q_torch, q_cpp = _int_values(expected, 1 / 16, 128), _int_values(got, 1 / 16, 128)
    assert torch.equal(q_torch, q_cpp)
    assert torch.equal(q_torch, exact)
    ties = keep & (acc.remainder(2) == 1) & (acc != 0)
    assert ties.sum() > 20


def test_quantized_module_refuses_float_inputs():
    weight = torch.quantize_per_tensor(torch.randn(2, 2, 3, 3), 0.1, 0, torch.qint8)
    module = _quantized_module(fnnq.ConvAdd2d, weight, None, 0.1, 0)
    qx = torch.quantize_per_tensor(torch.randn(1, 2, 5, 5), 0.1, 0, torch.quint8)
    with pytest.raises(ModuleError, match="extra input must be a quantized tensor"):
        module(qx, torch.randn(1, 2, 3, 3))
    with pytest.raises(ModuleError, match=r"extra input has shape \[1, 2, 5, 5\]; expected"):
        module(qx, qx)


# ---- the lowered residual example through to_torch --------------------------------------


@pytest.fixture(scope="module")
def lowered_residual(cli, tmp_path_factory):
    folder = tmp_path_factory.mktemp("residual")
    out = folder / "residual_q.fsl"
    result = subprocess.run(
        [cli, "quantize", f"{REPO}/tools/examples/residual.textproto", "--backend=qnnpack",
         f"--config={REPO}/backend_configs/examples/conv_bn_add_relu.textproto",
         "--samples=8", "--seed=0", "--input-shape=1,4,8,8", "-o", str(out)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return out


def _residual_inputs():
    g = torch.Generator().manual_seed(3)
    inputs = [torch.randn(1, 4, 8, 8, generator=g) for _ in range(4)]
    inputs.append(torch.randn(1, 4, 8, 8, generator=g) * 50)  # saturates everywhere
    return inputs


def _compare_with_cpp(cli, tmp_path, path, gm):
    output = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    scale, zero_point = gm.conv.scale, gm.conv.zero_point
    for i, x in enumerate(_residual_inputs()):
        np.save(tmp_path / "x.npy", x.numpy())
        result = subprocess.run([cli, "run", str(path), f"--input={tmp_path}/x.npy",
                                 f"--output={tmp_path}/y.npy"], capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stderr
        with torch.no_grad():
            y = gm(x)
        assert output.op == "call_method" and output.target == "dequantize"
        got = _int_values(torch.from_numpy(np.load(tmp_path / "y.npy")), scale, zero_point)
        assert torch.equal(_int_values(y, scale, zero_point), got), f"input {i}"


def test_lowered_residual_runs_in_torch_as_in_fuselage(cli, tmp_path, lowered_residual):
    gm = fuselage.to_torch(lowered_residual)
    assert type(gm.conv) is fnnq.ConvAddReLU2d
    conv_node = next(n for n in gm.graph.nodes if n.target == "conv")
    assert len(conv_node.args) == 2  # both inputs quantized, no dequantize between
    _compare_with_cpp(cli, tmp_path, lowered_residual, gm)


def test_lowered_residual_exports_back_to_the_same_types(cli, tmp_path, lowered_residual):
    gm = fuselage.to_torch(lowered_residual)
    again = tmp_path / "again.textproto"
    fuselage.export(gm, None, again)
    assert 'type: "nniq.ConvAddReLU2d"' in again.read_text()
    _compare_with_cpp(cli, tmp_path, again, fuselage.to_torch(again))


def test_fused_float_model_exports_and_runs_in_fuselage(cli, tmp_path):
    model = _ConvBnAddReLU().eval()
    fused = fusers.fuse_conv_bn_add_relu(False, model.relu, (torch.add, (model.bn, model.conv),
                                                             MatchAllNode))

    class Fused(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = fused

        def forward(self, x):
            return self.conv(x, x)

    x = torch.randn(1, 4, 6, 6)
    got = _run_cpp(cli, tmp_path, Fused().eval(), [x])
    text = fuselage.to_proto(Fused().eval())
    assert [c.module.type for c in text.root.children] == ["nni.ConvAddReLU2d"]
    with torch.no_grad():
        assert torch.allclose(got, model(x), atol=1e-5)
        assert type(fuselage.to_torch(tmp_path / "model.fsl").conv) is fnn.ConvAddReLU2d


@pytest.mark.parametrize("stage", ["fuse", "reference"])
def test_fused_and_reference_residual_run_in_torch_as_in_fuselage(cli, tmp_path, stage):
    """`fuselage fuse` gives nni.ConvAddReLU2d (child 0 nn.Conv2d), `quantize --reference`
    the same with an nnqr.Conv2d child: both run in torch as fuselage's float kernels do."""
    config = f"--config={REPO}/backend_configs/examples/conv_bn_add_relu.textproto"
    model = f"{REPO}/tools/examples/residual.textproto"
    out = tmp_path / f"{stage}.fsl"
    if stage == "fuse":
        args = ["fuse", model, config, "-o", out]
    else:
        args = ["quantize", model, "--backend=qnnpack", config, "--samples=8", "--seed=0",
                "--input-shape=1,4,8,8", "--reference", "-o", out]
    result = subprocess.run([cli, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    gm = fuselage.to_torch(out)
    assert type(gm.conv) is fnn.ConvAddReLU2d
    assert type(gm.conv[0]) is (nn.Conv2d if stage == "fuse" else
                                torch.ao.nn.quantized.reference.Conv2d)
    for x in _residual_inputs()[:3]:
        np.save(tmp_path / "x.npy", x.numpy())
        result = subprocess.run([cli, "run", str(out), f"--input={tmp_path}/x.npy",
                                 f"--output={tmp_path}/y.npy"], capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stderr
        with torch.no_grad():
            assert torch.allclose(gm(x), torch.from_numpy(np.load(tmp_path / "y.npy")), atol=1e-5)


def test_from_float_and_from_reference_quantize_the_weight_as_pytorch():
    from torch.ao.quantization import get_default_qconfig
    from torch.ao.nn.quantized.reference import Conv2d as RefConv2d
    from torch.ao.quantization.utils import get_qparam_dict

    conv = _conv(4)
    fused = fnn.ConvAddReLU2d(conv, nn.ReLU())
    fused.qconfig = get_default_qconfig("qnnpack")
    fused.activation_post_process = fused.qconfig.activation()
    fused.activation_post_process(torch.randn(1, 6, 5, 5))
    q = fnnq.ConvAddReLU2d.from_float(fused)
    # nnq.Conv2d.from_float on the bare conv is PyTorch's own answer for the weight.
    conv.qconfig, conv.activation_post_process = fused.qconfig, fused.activation_post_process
    want = torch.ao.nn.quantized.Conv2d.from_float(conv)
    assert torch.equal(q.weight().int_repr(), want.weight().int_repr())
    assert q.weight().q_scale() == want.weight().q_scale() and q.scale == want.scale
    observer = fused.qconfig.weight()
    observer(conv.weight)
    ref_conv = RefConv2d.from_float(conv, get_qparam_dict(observer))  # as convert_fx does
    q = fnnq.ConvAdd2d.from_reference(fnn.ConvAdd2d(ref_conv), 0.5, 3)
    assert torch.equal(q.weight().int_repr(), ref_conv.get_quantized_weight().int_repr())
    assert (q.scale, q.zero_point) == (0.5, 3)
    with pytest.raises(ModuleError, match="from_float: expected a fuselage.nn.ConvAddReLU2d"):
        fnnq.ConvAddReLU2d.from_float(conv)


def test_quantized_modules_hold_any_weight_under_any_engine():
    """onednn's prepack refuses weight zero points != 0; these modules pack nothing."""
    previous = torch.backends.quantized.engine
    try:
        for engine in ("onednn", "qnnpack"):
            torch.backends.quantized.engine = engine
            weight = torch.quantize_per_tensor(torch.randn(4, 2, 3, 3), 0.02, 3, torch.qint8)
            module = _quantized_module(fnnq.ConvAdd2d, weight, torch.randn(4), 0.1, 5, padding=1)
            assert torch.equal(module.weight().int_repr(), weight.int_repr())
            copied = copy.deepcopy(module)
            restored = fnnq.ConvAdd2d(2, 4, 3, padding=1)
            restored.load_state_dict(module.state_dict())
            for other in (copied, restored):
                assert torch.equal(other.weight().int_repr(), weight.int_repr())
                assert torch.equal(other.bias(), module.bias())
                assert other.zero_point == 5
            # nnq's state_dict stores the scale as a float32 tensor, as PyTorch does.
            assert copied.scale == 0.1 and restored.scale == float(torch.tensor(0.1))
    finally:
        torch.backends.quantized.engine = previous
    with pytest.raises(ModuleError, match="must be a 4-d torch.qint8 quantized tensor"):
        module.set_weight_bias(torch.randn(4, 2, 3, 3), None)
    with pytest.raises(ModuleError, match=r"bias must be None or float32 of shape \[4\]"):
        module.set_weight_bias(weight, torch.randn(3))
