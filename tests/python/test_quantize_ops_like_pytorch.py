"""Per op, fuselage's prepare and quantize (fuse, prepare, calibrate, convert, lower) against
PyTorch 1.13's prepare_fx / convert_fx on the same small model (qnnpack backend config,
default qconfig mapping): the prepared graph has as many observer nodes and as many
distinct observer instances (so the same sharing: cat, pass-through ops), and the lowered
graph calls the same functions, methods and module types, as many times each. Fixed-
qparams ops carry PyTorch's fixed scale and zero point."""
import collections
import copy
import subprocess

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.backend_config import get_qnnpack_backend_config
from torch.ao.quantization.observer import ObserverBase
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

import fuselage
from fuselage._importer import _parse, _read_bytes
from fuselage._names import function_name, module_type_name

OBSERVER_TYPES = {"MinMaxObserver", "HistogramObserver", "FixedQParamsObserver",
                  "PerChannelMinMaxObserver", "MovingAverageMinMaxObserver"}


class ConvThen(nn.Module):
    """conv → op(s): the conv quantizes the input, as in a real model."""

    def __init__(self, then, channels=4):
        super().__init__()
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        self.then = then

    def forward(self, x):
        return self.then(self.conv(x))


class Cat(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 2, 1)
        self.b = nn.Conv2d(3, 2, 1)
        self.c = nn.Conv2d(2, 2, 1)

    def forward(self, x):
        b = self.b(x)
        return torch.cat([self.a(x), b], 1), self.c(b)


class Functional(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3, 3, 3))
        self.b = nn.Parameter(torch.randn(4))
        self.lw = nn.Parameter(torch.randn(5, 4))

    def forward(self, x):
        y = F.relu(F.conv2d(x, self.w, self.b, [1, 1], [1, 1], [1, 1], 1))
        return F.linear(y.mean([2, 3]), self.lw)


class Lambda(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def bn_relu():
    bn = nn.BatchNorm2d(4)
    bn.running_mean.uniform_(-0.2, 0.2)
    bn.running_var.uniform_(0.5, 1.5)
    return nn.Sequential(bn, nn.ReLU())


class Shapes(nn.Module):
    def forward(self, x):
        y = x.permute(0, 2, 3, 1).contiguous().transpose(1, 2)
        y = y.reshape(1, -1).view(1, 4, -1).unsqueeze(0).squeeze(0)
        return y.flatten(1)


class GroupNormF(nn.Module):
    """F.group_norm with get_attr weight and bias (torch.fx passes them as keywords)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand(4))
        self.b = nn.Parameter(torch.rand(4))

    def forward(self, x):
        return F.group_norm(x, 2, self.w, self.b)


class LayerNormF(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.rand(8))

    def forward(self, x):
        return F.layer_norm(x, [8], self.w)


class MatMul(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 2, 1)
        self.b = nn.Conv2d(3, 2, 1)

    def forward(self, x):
        return torch.matmul(self.a(x), self.b(x))


CASES = {
    "matmul": (MatMul, (1, 3, 8, 8)),
    "instance_norm": (lambda: ConvThen(nn.InstanceNorm2d(4, affine=True)), (1, 3, 8, 8)),
    "F.group_norm": (lambda: ConvThen(GroupNormF()), (1, 3, 8, 8)),
    # Float in PyTorch 1.13's qnnpack config too (only "native" has layer norm entries).
    "layer_norm": (lambda: ConvThen(nn.LayerNorm([8])), (1, 3, 8, 8)),
    "F.layer_norm": (lambda: ConvThen(LayerNormF()), (1, 3, 8, 8)),
    "group_norm": (lambda: ConvThen(nn.GroupNorm(2, 4)), (1, 3, 8, 8)),
    "cat": (Cat, (1, 3, 8, 8)),
    "sigmoid": (lambda: ConvThen(nn.Sigmoid()), (1, 3, 8, 8)),
    "torch.sigmoid": (lambda: ConvThen(Lambda(torch.sigmoid)), (1, 3, 8, 8)),
    "hardsigmoid": (lambda: ConvThen(nn.Hardsigmoid()), (1, 3, 8, 8)),
    "tanh": (lambda: ConvThen(nn.Tanh()), (1, 3, 8, 8)),
    "softmax": (lambda: ConvThen(nn.Softmax(dim=1)), (1, 3, 8, 8)),
    "hardswish": (lambda: ConvThen(nn.Hardswish()), (1, 3, 8, 8)),
    "F.hardswish": (lambda: ConvThen(Lambda(F.hardswish)), (1, 3, 8, 8)),
    "elu": (lambda: ConvThen(nn.ELU()), (1, 3, 8, 8)),
    "leaky_relu": (lambda: ConvThen(nn.LeakyReLU(0.2)), (1, 3, 8, 8)),
    "bn_relu": (lambda: ConvThen(nn.Sequential(nn.ReLU(), bn_relu())), (1, 3, 8, 8)),
    "batch_norm": (lambda: ConvThen(nn.Sequential(nn.ReLU(), bn_relu()[0])), (1, 3, 8, 8)),
    "mean": (lambda: ConvThen(Lambda(lambda y: y.mean([2, 3]))), (1, 3, 8, 8)),
    "torch.mean": (lambda: ConvThen(Lambda(lambda y: torch.mean(y, 1))), (1, 3, 8, 8)),
    "shape_ops": (lambda: ConvThen(Shapes()), (1, 3, 8, 8)),
    "dropout_identity": (lambda: ConvThen(nn.Sequential(nn.Dropout(), nn.Identity())),
                         (1, 3, 8, 8)),
    "pools": (lambda: ConvThen(nn.Sequential(nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1))),
              (1, 3, 8, 8)),
    "functional_conv_linear": (Functional, (1, 3, 8, 8)),
    "conv1d": (lambda: nn.Sequential(nn.Conv1d(3, 4, 3), nn.ReLU()), (1, 3, 8)),
    "conv3d": (lambda: nn.Sequential(nn.Conv3d(3, 4, 3)), (1, 3, 4, 4, 4)),
    "conv_transpose2d": (lambda: ConvThen(nn.ConvTranspose2d(4, 2, 3, stride=2)),
                         (1, 3, 8, 8)),
    "conv_transpose1d": (lambda: nn.Sequential(nn.Conv1d(3, 4, 1), nn.ConvTranspose1d(4, 2, 3)),
                         (1, 3, 8)),
}


KEPT_FLOAT = {"shape_ops": ["flatten"], "layer_norm": ["then"], "F.layer_norm": ["layer_norm"],
              "group_norm": ["then"]}


def torch_prepared_observers(prepared):
    modules = dict(prepared.named_modules(remove_duplicate=False))
    nodes = [n for n in prepared.graph.nodes
             if n.op == "call_module" and isinstance(modules[n.target], ObserverBase)]
    return len(nodes), len({id(modules[n.target]) for n in nodes})


def torch_calls(gm):
    modules = dict(gm.named_modules())
    calls = collections.Counter()
    for n in gm.graph.nodes:
        if n.op == "call_module":
            calls["module " + module_type_name(type(modules[n.target]))] += 1
        elif n.op == "call_function":
            t = n.target
            name = (f"torch.ops.{t}" if isinstance(t, torch._ops.OpOverloadPacket)
                    else function_name(t))
            calls["function " + name] += 1
        elif n.op == "call_method":
            calls["method " + n.target] += 1
    return calls


def fuselage_graph(path):
    model = _parse(str(path), _read_bytes(str(path)))

    def type_of(target):
        module = model.root
        for part in target.split("."):
            module = next(c.module for c in module.children if c.name == part)
        return module.type

    return model, type_of


def fuselage_prepared_observers(path):
    model, type_of = fuselage_graph(path)
    targets = [n.target for n in model.graph.nodes
               if n.op == 4 and type_of(n.target) in OBSERVER_TYPES]
    return len(targets), len(set(targets))


def torch_fixed_qparams(prepared):
    from torch.ao.quantization.observer import FixedQParamsObserver
    return sorted((float(m.scale), int(m.zero_point)) for m in prepared.modules()
                  if isinstance(m, FixedQParamsObserver))


def fuselage_fixed_qparams(path):
    model, type_of = fuselage_graph(path)
    found = []

    def walk(module):
        if module.type == "FixedQParamsObserver":
            attrs = {a.name: a.value for a in module.attributes}
            found.append((attrs["scale"].float_value, attrs["zero_point"].int_value))
        for child in module.children:
            walk(child.module)

    walk(model.root)
    return sorted(found)


def fuselage_calls(path):
    model, type_of = fuselage_graph(path)
    calls = collections.Counter()
    for n in model.graph.nodes:
        if n.op == 4:
            calls["module " + type_of(n.target)] += 1
        elif n.op == 3:
            calls["function " + n.target] += 1
        elif n.op == 5:
            calls["method " + n.target] += 1
    return calls


def run_cli(cli, *args):
    out = subprocess.run([cli, *map(str, args)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("case", sorted(CASES))
def test_observers_and_lowered_targets_match_pytorch(cli, tmp_path, case):
    make, shape = CASES[case]
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(*shape)
    torch.backends.quantized.engine = "qnnpack"
    backend = get_qnnpack_backend_config()
    prepared = prepare_fx(copy.deepcopy(model), get_default_qconfig_mapping("qnnpack"), (x,),
                          backend_config=backend)
    prepared(x)
    want_observers = torch_prepared_observers(prepared)
    want_fixed = torch_fixed_qparams(prepared)
    converted = convert_fx(prepared, backend_config=backend)

    fuselage.export(model, (x,), str(tmp_path / "f.fsl"))
    np.save(tmp_path / "x.npy", x.numpy())
    # prepare_fx fuses first; `fuselage prepare` takes a fused model.
    run_cli(cli, "fuse", tmp_path / "f.fsl", "--backend=qnnpack", "-o", tmp_path / "fused.fsl")
    run_cli(cli, "prepare", tmp_path / "fused.fsl", "--backend=qnnpack", "-o", tmp_path / "p.fsl")
    assert fuselage_prepared_observers(tmp_path / "p.fsl") == want_observers
    # Fixed-qparams ops: PyTorch's scale and zero point (1/256, 0 or 2/256, 128).
    assert fuselage_fixed_qparams(tmp_path / "p.fsl") == want_fixed
    if case in ("sigmoid", "torch.sigmoid", "hardsigmoid", "softmax", "tanh"):
        assert len(want_fixed) == 1

    report = run_cli(cli, "quantize", tmp_path / "f.fsl", "--backend=qnnpack",
                     f"--calibration={tmp_path / 'x.npy'}", "-o", tmp_path / "q.fsl")
    # What PyTorch leaves float too, named by the report: x.flatten() (the method) and the
    # layer / group norms have no entry in PyTorch 1.13's qnnpack config.
    kept = [line.split()[2] for line in report.splitlines() if "kept float:" in line]
    assert kept == KEPT_FLOAT.get(case, []), report
    got = fuselage_calls(tmp_path / "q.fsl")
    want = torch_calls(converted)
    # PyTorch packs a functional weight into a get_attr (fold_weight); fuselage quantizes
    # it once into a get_attr too, so neither calls anything for it.
    assert got == want, f"fuselage {sorted(got.items())}\nPyTorch  {sorted(want.items())}\n{report}"
