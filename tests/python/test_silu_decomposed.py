"""backend_configs/examples/silu_decomposed.textproto (issue 21 item 3): x * sigmoid(x), a
named capture used twice, fuses into one nn.SiLU in every spelling of mul and sigmoid, and
not where the sigmoid's result is also read outside the pattern. Fused vs unfused numerics
through the interpreter, and both against PyTorch."""

import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from test_pattern_examples import EXAMPLES, assert_close_relative, interpret, load_model, \
    meta_of, module_at, run

CONFIG = os.path.join(EXAMPLES, "silu_decomposed.textproto")

MULS = [
    lambda a, b: a * b,
    lambda a, b: torch.mul(a, b),
    lambda a, b: a.mul(b),
]


class EverySiluSpelling(nn.Module):
    """A chain of x * sigmoid(x) in each spelling (4 sigmoids x 3 muls, args in both orders),
    then one whose sigmoid has a second user outside the pattern."""

    def __init__(self):
        super().__init__()
        self.sigmoids = nn.ModuleList([nn.Sigmoid() for _ in range(len(MULS))])

    def sigmoid(self, kind, h, i):
        if kind == 0:
            return torch.sigmoid(h)
        if kind == 1:
            return F.sigmoid(h)
        if kind == 2:
            return h.sigmoid()
        return self.sigmoids[i](h)

    def forward(self, x):
        h = x
        n = 0
        for kind in range(4):
            for i, mul in enumerate(MULS):
                s = self.sigmoid(kind, h, i)
                h = mul(h, s) if n % 2 == 0 else mul(s, h)
                n += 1
        shared = torch.sigmoid(h)  # read by the product and by the add below: no fusion
        return h * shared + shared


def test_silu_decomposed_fuses_every_spelling_and_not_a_shared_sigmoid(cli, tmp_path):
    import fuselage

    torch.manual_seed(0)
    model = EverySiluSpelling().eval()
    x = torch.randn(2, 5, 7) * 3
    source = tmp_path / "silu.fsl"
    fused_path = tmp_path / "fused.fsl"
    fuselage.export(model, (x,), str(source))
    run([cli, "fuse", source, f"--config={CONFIG}", "-o", fused_path])
    run([cli, "verify", fused_path])

    fused = load_model(fused_path)
    silu_nodes = [n for n in fused.graph.nodes if meta_of(n, "pattern") is not None]
    assert len(silu_nodes) == 12
    for node in silu_nodes:
        assert meta_of(node, "pattern").string_value == "silu_decomposed"
        module = module_at(fused, node.target)
        assert module.type == "nn.SiLU"
        assert list(module.children) == []
        assert len(node.args) == 1  # x once, though the pattern reads it twice
    # The last sigmoid and its product are still there.
    # (A fused node takes its root's name: the sigmoid's.)
    remaining_sigmoids = [n for n in fused.graph.nodes
                          if "sigmoid" in n.target and meta_of(n, "pattern") is None]
    assert len(remaining_sigmoids) == 1

    report = run([cli, "explain", source, f"--config={CONFIG}"])
    assert "2 users" in report and "inner nodes may have 1" in report

    x_np = x.numpy()
    unfused_out = interpret(cli, source, x_np, tmp_path, "unfused")
    fused_out = interpret(cli, fused_path, x_np, tmp_path, "fused")
    assert_close_relative(fused_out, unfused_out)
    with torch.no_grad():
        expected = model(x).numpy()
    assert_close_relative(fused_out, expected, 1e-5)
