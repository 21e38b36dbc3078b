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

    x = np.random.default_rng(0).standard_normal((1, 3, 64, 64)).astype(np.float32)
    unfused = interpret(cli, source, x, tmp_path, "unfused")
    fused = interpret(cli, fused_path, x, tmp_path, "fused")
    assert_close_relative(fused, unfused)
