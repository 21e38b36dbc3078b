"""The issue 21 example configs (backend_configs/examples/) on real models: predicates,
alternatives and optional positions, fused vs unfused numerics through the interpreter."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn as nn
import torchvision

from conftest import REPO

from fuselage import _proto

EXAMPLES = os.path.join(REPO, "backend_configs", "examples")


def run(cmd):
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def load_model(path):
    model = _proto.model_pb2().Model()
    with open(path, "rb") as f:
        model.ParseFromString(f.read())
    return model


def module_at(model, path):
    module = model.root
    for step in path.split("."):
        module = next(c.module for c in module.children if c.name == step)
    return module


def meta_of(node, key):
    for entry in node.meta:
        if entry.name == key:
            return entry.value
    return None


def strings(arg):
    return [item.string_value for item in arg.list.items]


def interpret(cli, model_path, x, tmp_path, tag):
    np.save(tmp_path / f"x_{tag}.npy", x)
    run([cli, "run", model_path, f"--input={tmp_path / f'x_{tag}.npy'}",
         f"--output={tmp_path / f'y_{tag}.npy'}"])
    return np.load(tmp_path / f"y_{tag}.npy")


def assert_close_relative(fused, unfused, tolerance=1e-5):
    scale = max(np.abs(unfused).max(), 1e-12)
    assert np.abs(fused - unfused).max() / scale <= tolerance


def test_depthwise_example_fuses_every_depthwise_block_of_mobilenet_v2_and_no_other(cli, tmp_path):
    source = tmp_path / "mobilenet_v2.fsl"
    fused_path = tmp_path / "fused.fsl"
    run([sys.executable, "-m", "fuselage", "export-torchvision", "mobilenet_v2", source,
         "--input-size", "1", "3", "64", "64"])
    run([cli, "fuse", source, f"--config={os.path.join(EXAMPLES, 'depthwise_conv_bn_relu6.textproto')}",
         "-o", fused_path])
    run([cli, "verify", fused_path])

    # The expectation comes from torchvision's own module tree, not from fuselage.
    reference = torchvision.models.mobilenet_v2()
    convs = {name: m for name, m in reference.named_modules() if isinstance(m, nn.Conv2d)}
    depthwise = {n for n, m in convs.items() if m.groups == m.in_channels and m.groups > 1}
    assert len(depthwise) == 17

    model = load_model(fused_path)
    fused_roots = {}
    for node in model.graph.nodes:
        if meta_of(node, "pattern") is None:
            continue
        assert meta_of(node, "pattern").string_value == "depthwise_conv_bn_act"
        module = module_at(model, node.target)
        assert module.type == "nni.ConvAct2d"
        children = {c.name: c.module.type for c in module.children}
        assert children == {"0": "nn.Conv2d", "1": "nn.ReLU6"}
        # Which alternative matched, per op position in preorder: activation, bn, conv.
        assert strings(meta_of(node, "pattern_alternatives")) == ["ReLU6", "BatchNorm2d", "Conv2d"]
        conv = module_at(model, node.target).children[0].module
        groups = next(a.value.int_value for a in conv.attributes if a.name == "groups")
        assert groups > 1
        fused_roots[node.target] = node
    assert set(fused_roots) == depthwise
    # Every pointwise / ordinary conv is still a plain nn.Conv2d call.
    plain = {n.target for n in model.graph.nodes
             if n.op == _proto.model_pb2().CALL_MODULE and module_at(model, n.target).type == "nn.Conv2d"}
    assert plain == set(convs) - depthwise

    # explain names the predicate that kept each pointwise conv out, with the values it saw
    # (torchvision's features.18.0 is the 320 -> 1280 1x1 conv).
    report = run([cli, "explain", source,
                  f"--config={os.path.join(EXAMPLES, 'depthwise_conv_bn_relu6.textproto')}"])
    last = convs["features.18.0"]
    assert (f"predicate 'groups == in_channels' is false (groups = 1, in_channels = "
            f"{last.in_channels})") in report
    assert "depthwise_conv_bn_act: 17" in report

    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    unfused = interpret(cli, source, x, tmp_path, "unfused")
    fused = interpret(cli, fused_path, x, tmp_path, "fused")
    assert_close_relative(fused, unfused)


class EveryConvActVariant(nn.Module):
    """conv-bn-relu, conv-relu6, conv-bn-hardswish, conv-hardswish, conv-bn-relu6, conv-relu,
    then a conv-bn-sigmoid that the entry must leave alone."""

    ACTIVATIONS = [("relu", True), ("relu6", False), ("hardswish", True), ("hardswish", False),
                   ("relu6", True), ("relu", False)]

    def __init__(self):
        super().__init__()
        kinds = {"relu": nn.ReLU, "relu6": nn.ReLU6, "hardswish": nn.Hardswish}
        self.convs = nn.ModuleList(nn.Conv2d(4 if i else 3, 4, 3, padding=1)
                                   for i in range(len(self.ACTIVATIONS) + 1))
        self.bns = nn.ModuleList(nn.BatchNorm2d(4) for _ in range(len(self.ACTIVATIONS) + 1))
        self.acts = nn.ModuleList(kinds[k]() for k, _ in self.ACTIVATIONS)
        self.sigmoid = nn.Sigmoid()

    def forward(self, x):
        for i, (_, with_bn) in enumerate(self.ACTIVATIONS):
            x = self.convs[i](x)
            if with_bn:
                x = self.bns[i](x)
            x = self.acts[i](x)
        last = len(self.ACTIVATIONS)
        return self.sigmoid(self.bns[last](self.convs[last](x)))


def test_optional_example_fuses_each_conv_bn_act_variant_with_one_entry(cli, tmp_path):
    from conftest import randomize_batch_norm

    torch.manual_seed(0)
    model = randomize_batch_norm(EveryConvActVariant().eval())
    source = tmp_path / "variants.fsl"
    fused_path = tmp_path / "fused.fsl"
    x = torch.randn(1, 3, 12, 12)
    import fuselage
    fuselage.export(model, (x,), str(source))
    run([cli, "fuse", source, f"--config={os.path.join(EXAMPLES, 'conv_bn_act_optional.textproto')}",
         "-o", fused_path])
    run([cli, "verify", fused_path])

    fused = load_model(fused_path)
    module_type = {"relu": "nn.ReLU", "relu6": "nn.ReLU6", "hardswish": "nn.Hardswish"}
    leaf = {"relu": "ReLU", "relu6": "ReLU6", "hardswish": "Hardswish"}
    by_root = {}
    for node in fused.graph.nodes:
        if meta_of(node, "pattern") is not None:
            by_root[node.target] = node
    # One fusion per variant, rooted at its conv; the last conv (before the sigmoid) stays.
    assert set(by_root) == {f"convs.{i}" for i in range(len(model.ACTIVATIONS))}
    for i, (kind, with_bn) in enumerate(model.ACTIVATIONS):
        node = by_root[f"convs.{i}"]
        module = module_at(fused, node.target)
        assert module.type == "nni.ConvAct2d"
        assert [(c.name, c.module.type) for c in module.children] == [
            ("0", "nn.Conv2d"), ("1", module_type[kind])]
        # Preorder: activation, batch norm ("" when absent), conv.
        assert strings(meta_of(node, "pattern_alternatives")) == [
            leaf[kind], "BatchNorm2d" if with_bn else "", "Conv2d"]
        assert strings(meta_of(node, "pattern_absent")) == ([] if with_bn else ["0"])  # the bn is arg 0 of the activation
    last = len(model.ACTIVATIONS)
    assert module_at(fused, f"convs.{last}").type == "nn.Conv2d"
    assert module_at(fused, f"bns.{last}").type == "nn.BatchNorm2d"

    x_np = x.numpy()
    unfused_out = interpret(cli, source, x_np, tmp_path, "unfused")
    fused_out = interpret(cli, fused_path, x_np, tmp_path, "fused")
    assert_close_relative(fused_out, unfused_out)
    # And both agree with PyTorch itself.
    with torch.no_grad():
        expected = model(x).numpy()
    assert_close_relative(unfused_out, expected, 1e-4)
