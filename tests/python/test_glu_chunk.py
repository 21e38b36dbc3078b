"""backend_configs/examples/glu_chunk.textproto (issue 21 item 3, multi-output patterns): a GLU
written as chunk -> a * sigmoid(b) fuses into one fuselage.FusedSubgraph in each spelling; where
b is also read outside the pattern, the entry that declares b an output (`-> $b`) fuses it into
one node with two outputs, the outside reader taking getitem(fused, 1). Fused vs unfused
numerics through the interpreter (equal: the same kernels run) and both against PyTorch."""

import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from test_pattern_examples import EXAMPLES, assert_close_relative, interpret, load_model, \
    meta_of, module_at, run

CONFIG = os.path.join(EXAMPLES, "glu_chunk.textproto")


class GluChain(nn.Module):
    """Three GLUs in three spellings, then one whose second half b is also added to the
    result (b read outside the pattern)."""

    def __init__(self):
        super().__init__()
        self.sigmoid = nn.Sigmoid()

    # torch.fx cannot unpack a chunk's proxy (`a, b = x.chunk(2)`): its halves are indexed,
    # which traces to the same operator.getitem nodes.
    def forward(self, x):
        c = x.chunk(2, dim=-1)
        a, b = c[0], c[1]
        h = a * torch.sigmoid(b)                       # 8 -> 4 features
        h = torch.cat([h, h * 0.5], dim=-1)
        c = torch.chunk(h, 2, dim=-1)
        a, b = c[0], c[1]
        h = torch.mul(self.sigmoid(b), a)              # args swapped, nn.Sigmoid
        h = torch.cat([h, h * 2.0], dim=-1)
        c = h.chunk(2, -1)                             # dim positional: 3 args, no match
        a, b = c[0], c[1]
        h = a * F.sigmoid(b)
        h = torch.cat([h, h + 1], dim=-1)
        c = h.chunk(2, dim=-1)
        a, b = c[0], c[1]
        return a * torch.sigmoid(b) + b                # b: a second, outside reader


def fused_nodes(model):
    return [n for n in model.graph.nodes if meta_of(n, "pattern") is not None]


def test_glu_chunk_fuses_with_one_and_with_two_outputs(cli, tmp_path):
    import fuselage

    torch.manual_seed(0)
    model = GluChain().eval()
    x = torch.randn(3, 5, 8) * 2
    source = tmp_path / "glu.fsl"
    fused_path = tmp_path / "fused.fsl"
    fuselage.export(model, (x,), str(source))
    run([cli, "fuse", source, f"--config={CONFIG}", "-o", fused_path])
    run([cli, "verify", fused_path])

    fused = load_model(fused_path)
    nodes = fused_nodes(fused)
    rules = sorted(meta_of(n, "pattern").string_value for n in nodes)
    # Two single-output GLUs, the shared one; the chunk with a positional dim does not match.
    assert rules == ["glu_chunk", "glu_chunk", "glu_chunk_shared"]
    for node in nodes:
        module = module_at(fused, node.target)
        assert module.type == "fuselage.FusedSubgraph"
        assert len(node.args) == 1  # x alone: the chunk's 2 and dim stay inside
    shared = next(n for n in nodes if meta_of(n, "pattern").string_value == "glu_chunk_shared")
    readers = [n for n in fused.graph.nodes
               if n.target == "operator.getitem" and n.args
               and n.args[0].node == shared.name]
    assert sorted(r.args[1].int_value for r in readers) == [0, 1]
    # (A fused node takes its root's name and module path: the chunk's.)
    unfused_chunks = [n for n in fused.graph.nodes
                      if "chunk" in n.target and meta_of(n, "pattern") is None]
    assert len(unfused_chunks) == 1

    # Without the `-> $b` entry the shared GLU is refused, and explain says why.
    report = run([cli, "explain", source, f"--config={CONFIG}"])
    assert "glu_chunk at" in report and "is not a declared output" in report

    x_np = x.numpy()
    unfused_out = interpret(cli, source, x_np, tmp_path, "unfused")
    fused_out = interpret(cli, fused_path, x_np, tmp_path, "fused")
    assert np.array_equal(fused_out, unfused_out)
    with torch.no_grad():
        expected = model(x).numpy()
    assert_close_relative(fused_out, expected, 1e-5)
