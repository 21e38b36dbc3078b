"""torch.matmul on quantized tensors as PyTorch 1.13 runs it: lowering writes
torch.ops.quantized.matmul(qa, qb, scale, zero_point), and fuselage's kernel
(runtime/quantized/matmul.h) gives PyTorch's own op's outputs on random operands (≥ 99.9 %
equal, none more than one step apart: PyTorch multiplies the dequantized operands with
MKL, fuselage with its own float matmul); `fuselage quantize` of conv, conv → matmul
gives PyTorch's calls and runs, within one step of PyTorch's converted model."""

import copy
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.backend_config import get_qnnpack_backend_config
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

import fuselage
from test_quantize_ops_like_pytorch import fuselage_calls, torch_calls


def run(cli, path, inputs, tmp_path):
    names = []
    for i, x in enumerate(inputs):
        names.append(tmp_path / f"x{i}.npy")
        np.save(names[-1], x.numpy())
    out = subprocess.run([cli, "run", str(path), "--input=" + ",".join(map(str, names)),
                          f"--output={tmp_path / 'y.npy'}"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return torch.from_numpy(np.load(tmp_path / "y.npy"))


def assert_within_one_step(got, want, step):
    assert got.shape == want.shape
    steps = ((got - want).abs() / step).round()
    assert steps.max().item() <= 1, steps.max().item()
    assert (steps == 0).float().mean().item() >= 0.999, (steps != 0).sum().item()


class QuantizedMatMulOnly(nn.Module):
    def __init__(self, a_qparams, b_qparams, out_qparams, dtype):
        super().__init__()
        self.a_qparams, self.b_qparams, self.out_qparams = a_qparams, b_qparams, out_qparams
        self.dtype = dtype

    def forward(self, a, b):
        qa = torch.quantize_per_tensor(a, *self.a_qparams, self.dtype)
        qb = torch.quantize_per_tensor(b, *self.b_qparams, self.dtype)
        return torch.ops.quantized.matmul(qa, qb, *self.out_qparams).dequantize()


# (a shape, b shape, a qparams, b qparams, output qparams, dtype)
KERNEL_CASES = {
    "2d_quint8": ((24, 40), (40, 16), (0.05, 128), (0.03, 120), (0.4, 100), torch.quint8),
    "batched_broadcast": ((3, 2, 9, 17), (17, 11), (0.02, 30), (0.04, 200), (0.1, 128),
                          torch.quint8),
    "qint8": ((2, 8, 33), (2, 33, 8), (0.03, 0), (0.05, -4), (0.2, 3), torch.qint8),
}


@pytest.mark.parametrize("case", sorted(KERNEL_CASES))
def test_quantized_matmul_kernel_matches_pytorch(cli, tmp_path, case):
    a_shape, b_shape, aq, bq, oq, dtype = KERNEL_CASES[case]
    g = torch.Generator().manual_seed(len(case))
    a, b = torch.randn(*a_shape, generator=g) * 2, torch.randn(*b_shape, generator=g) * 2
    model = torch.fx.symbolic_trace(QuantizedMatMulOnly(aq, bq, oq, dtype))
    with torch.no_grad():
        want = model(a, b)
    assert len(torch.unique(want)) > 20  # a real spread of values, not all saturated
    fuselage.export(model, (a, b), str(tmp_path / "mm.fsl"))
    got = run(cli, tmp_path / "mm.fsl", [a, b], tmp_path)
    assert_within_one_step(got, want, oq[0])


class ConvMatMul(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        return torch.matmul(self.a(x), self.b(x))


def test_conv_matmul_quantizes_and_runs_like_pytorch(cli, tmp_path):
    engine = torch.backends.quantized.engine
    torch.backends.quantized.engine = "qnnpack"
    try:
        torch.manual_seed(0)
        model = ConvMatMul().eval()
        x = torch.randn(1, 3, 16, 16)
        backend = get_qnnpack_backend_config()
        prepared = prepare_fx(copy.deepcopy(model), get_default_qconfig_mapping("qnnpack"),
                              (x,), backend_config=backend)
        with torch.no_grad():
            prepared(x)
        converted = convert_fx(prepared, backend_config=backend)
        assert torch_calls(converted)["function torch.ops.quantized.matmul"] == 1
        with torch.no_grad():
            want = converted(x)

        fuselage.export(model, (x,), str(tmp_path / "f.fsl"))
        np.save(tmp_path / "calibration.npy", x.numpy())
        quantize = subprocess.run(
            [cli, "quantize", str(tmp_path / "f.fsl"), "--backend=qnnpack",
             f"--calibration={tmp_path / 'calibration.npy'}", "-o", str(tmp_path / "q.fsl")],
            capture_output=True, text=True, timeout=300)
        assert quantize.returncode == 0, quantize.stderr
        assert fuselage_calls(tmp_path / "q.fsl") == torch_calls(converted), quantize.stdout
        got = run(cli, tmp_path / "q.fsl", [x], tmp_path)
        matmul = next(n for n in converted.graph.nodes
                      if n.target == torch.ops.quantized.matmul)
        step = float(getattr(converted, matmul.args[2].target))
        assert_within_one_step(got, want, step)
    finally:
        torch.backends.quantized.engine = engine
