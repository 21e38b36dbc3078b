"""fuselage's `quantize` (fuse, prepare, calibrate, convert, lower) against PyTorch 1.13's
prepare_fx / convert_fx on torchvision models (1x3x64x64, randomized batch norms, the
qnnpack backend config and default qconfig mapping): the lowered graph has as many
quantize_per_tensor and dequantize nodes as PyTorch's (observers shared across cat and
the pass-through ops, fixed-qparams ops, special-pattern modules lowered), and the same
quantized module types, call for call. densenet121 must end with 1 and 1."""
import collections
import subprocess

import numpy as np
import pytest
import torch
import torchvision

import fuselage
from conftest import quantize_with_pytorch, randomize_batch_norm
from fuselage._importer import _parse, _read_bytes

# PyTorch's module namespaces as graph/NAMING.md spells them.
_NAMESPACES = [
    ("torch.ao.nn.intrinsic.quantized.", "nniq."),
    ("torch.nn.intrinsic.quantized.", "nniq."),
    ("torch.ao.nn.quantized.", "nnq."),
    ("torch.nn.quantized.", "nnq."),
    ("torch.nn.modules.", "nn."),
]


def torch_type_name(module):
    full = f"{type(module).__module__}.{type(module).__name__}"
    for prefix, short in _NAMESPACES:
        if full.startswith(prefix):
            return short + type(module).__name__
    return full


def torch_counts(gm):
    """quantize / dequantize counts and a Counter of module types called, of PyTorch's
    converted graph."""
    modules = dict(gm.named_modules())
    calls = collections.Counter()
    q = dq = 0
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.quantize_per_tensor:
            q += 1
        elif n.op == "call_method" and n.target == "dequantize":
            dq += 1
        elif n.op == "call_module":
            calls[torch_type_name(modules[n.target])] += 1
    return q, dq, calls


def fuselage_counts(path):
    """The same of a fuselage model file, read with the model proto."""
    model = _parse(str(path), _read_bytes(str(path)))

    def find(module, dotted):
        for part in dotted.split("."):
            module = next(c.module for c in module.children if c.name == part)
        return module

    calls = collections.Counter()
    q = dq = 0
    for n in model.graph.nodes:
        if n.target == "torch.quantize_per_tensor":
            q += 1
        elif n.target == "dequantize":
            dq += 1
        elif n.op == 4:  # CALL_MODULE
            calls[find(model.root, n.target).type] += 1
    return q, dq, calls


@pytest.mark.parametrize("name", ["densenet121", "googlenet", "squeezenet1_1",
                                  "mobilenet_v3_large"])
def test_quantize_dequantize_and_module_counts_match_pytorch(cli, tmp_path, name):
    torch.manual_seed(0)
    kwargs = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    model = randomize_batch_norm(getattr(torchvision.models, name)(weights=None, **kwargs).eval(), 0)
    x = torch.randn(1, 3, 64, 64)
    torch.backends.quantized.engine = "qnnpack"
    _, _, converted = quantize_with_pytorch(model, x, [x])
    want_q, want_dq, want_calls = torch_counts(converted)

    fuselage.export(model, (x,), str(tmp_path / "f.fsl"))
    np.save(tmp_path / "x.npy", x.numpy())
    out = subprocess.run([cli, "quantize", str(tmp_path / "f.fsl"), "--backend=qnnpack",
                          f"--calibration={tmp_path / 'x.npy'}", "-o", str(tmp_path / "q.fsl")],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    got_q, got_dq, got_calls = fuselage_counts(tmp_path / "q.fsl")
    assert (got_q, got_dq) == (want_q, want_dq), out.stdout
    if name == "densenet121":
        assert (got_q, got_dq) == (1, 1)
    assert got_calls == want_calls
    # The prepare report keeps nothing float here, as PyTorch quantizes every op.
    assert "0 ops kept float" in out.stdout
    assert "left as reference" not in out.stdout, out.stdout
