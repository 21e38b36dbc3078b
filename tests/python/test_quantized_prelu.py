"""nn.PReLU quantized as PyTorch 1.13 does it.

- fuselage's quantized PReLU kernel (nnq.PReLU, quantized::prelu) gives PyTorch's own
  nnq.PReLU output bit for bit on random inputs and weights;
- `fuselage quantize` lowers conv → PReLU → conv to the same ops PyTorch's prepare_fx /
  convert_fx produce (an nnq.PReLU, no float PReLU island), with the weight quantized as
  nnq.PReLU.from_reference does, outputs within one step of PyTorch's, and
  fuselage.to_torch gives PyTorch's quantized PReLU module, running as fuselage does."""

import copy
import subprocess

import numpy as np
import pytest
import torch
import torch.ao.nn.quantized as nnq
import torch.nn as nn
from torch.ao.quantization import get_default_qconfig_mapping
from torch.ao.quantization.backend_config import (get_fbgemm_backend_config,
                                                  get_qnnpack_backend_config)
from torch.ao.quantization.quantize_fx import convert_fx, prepare_fx

import fuselage
from test_quantize_ops_like_pytorch import fuselage_calls, torch_calls


def run_fuselage(cli, tmp_path, path, x, outputs=1):
    np.save(tmp_path / "x.npy", x.numpy())
    names = [tmp_path / f"y{i}.npy" for i in range(outputs)]
    run = subprocess.run([cli, "run", str(path), f"--input={tmp_path / 'x.npy'}",
                          "--output=" + ",".join(map(str, names))],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return [torch.from_numpy(np.load(n)) for n in names]


class QuantizedPRelu(nn.Module):
    """quantize → nnq.PReLU → dequantize: the kernel alone. Equal dequantized values with
    the same output qparams are equal integers."""

    def __init__(self, prelu, scale, zero_point, dtype):
        super().__init__()
        self.prelu = prelu
        self.scale, self.zero_point, self.dtype = scale, zero_point, dtype

    def forward(self, x):
        q = torch.quantize_per_tensor(x, self.scale, self.zero_point, self.dtype)
        return self.prelu(q).dequantize()


# (input shape, slopes, input qparams, weight qparams, output qparams, dtype)
KERNEL_CASES = {
    "per_channel_4d": ((2, 5, 7, 9), 5, (0.04, 120), (0.01, 90), (0.03, 60), torch.quint8),
    "single_slope_3d": ((3, 4, 17), 1, (0.1, 10), (0.005, 200), (0.08, 128), torch.quint8),
    "from_reference_qparams": ((1, 6, 5, 5), 6, (0.02, 128), (1.0, 0), (0.05, 100),
                               torch.quint8),
    "qint8": ((2, 3, 11), 3, (0.05, -3), (0.02, 5), (0.04, 0), torch.qint8),
}


@pytest.mark.parametrize("case", sorted(KERNEL_CASES))
def test_quantized_prelu_kernel_equals_pytorchs(cli, tmp_path, case):
    shape, slopes, (xs, xz), (ws, wz), (ys, yz), dtype = KERNEL_CASES[case]
    g = torch.Generator().manual_seed(len(case))
    x = torch.randn(*shape, generator=g) * 3
    prelu = nnq.PReLU(ys, yz, slopes)
    prelu.set_weight(torch.quantize_per_tensor(torch.rand(slopes, generator=g) * 3 - 1,
                                               ws, wz, dtype))
    model = torch.fx.symbolic_trace(QuantizedPRelu(prelu, xs, xz, dtype))
    with torch.no_grad():
        want = model(x)
    # Both signs and some saturation really occur, so every branch is compared.
    assert (want == want.min()).any() and len(torch.unique(want)) > 20
    path = tmp_path / "prelu.fsl"
    fuselage.export(model, (x,), str(path))
    got, = run_fuselage(cli, tmp_path, path, x)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want), ((got - want).abs() / prelu.scale).round().max()


class ConvPReluConv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.prelu = nn.PReLU(8)
        self.conv2 = nn.Conv2d(8, 4, 1)
        with torch.no_grad():
            # Slopes near 0, 1 and 2 so the integer-rounded weight matters.
            self.prelu.weight.copy_(torch.tensor([0.3, 0.6, 1.2, 1.7, -0.4, 0.9, 2.2, 0.1]))

    def forward(self, x):
        return self.conv2(self.prelu(self.conv1(x)))


# backend → the engine PyTorch runs the converted model on (this torch has no fbgemm).
BACKENDS = {"qnnpack": ("qnnpack", get_qnnpack_backend_config),
            "fbgemm": ("onednn", get_fbgemm_backend_config)}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_conv_prelu_conv_quantizes_like_pytorch(cli, tmp_path, backend):
    engine_name, backend_config = BACKENDS[backend]
    engine = torch.backends.quantized.engine
    torch.backends.quantized.engine = engine_name
    try:
        torch.manual_seed(0)
        model = ConvPReluConv().eval()
        calibration = [torch.randn(1, 3, 10, 10) for _ in range(3)]
        x = torch.randn(1, 3, 10, 10)
        prepared = prepare_fx(copy.deepcopy(model), get_default_qconfig_mapping(backend),
                              (x,), backend_config=backend_config())
        with torch.no_grad():
            for batch in calibration:
                prepared(batch)
        converted = convert_fx(prepared, backend_config=backend_config())
        with torch.no_grad():
            want = converted(x)
        torch_prelu = converted.prelu
        assert isinstance(torch_prelu, nnq.PReLU)

        fuselage.export(model, (x,), str(tmp_path / "f.fsl"))
        # The same samples, one file each, in the same order (the observers see the
        # same batches as PyTorch's).
        samples = [tmp_path / f"calib{i}.npy" for i in range(len(calibration))]
        for path, batch in zip(samples, calibration):
            np.save(path, batch.numpy())
        quantize = subprocess.run(
            [cli, "quantize", str(tmp_path / "f.fsl"), f"--backend={backend}",
             "--calibration=" + ",".join(map(str, samples)), "-o", str(tmp_path / "q.fsl")],
            capture_output=True, text=True, timeout=300)
        assert quantize.returncode == 0, quantize.stderr
        got_calls = fuselage_calls(tmp_path / "q.fsl")
        assert got_calls == torch_calls(converted), (sorted(got_calls.items()),
                                                     quantize.stdout)
        assert got_calls["module nnq.PReLU"] == 1 and "module nn.PReLU" not in got_calls

        # to_torch rebuilds PyTorch's quantized PReLU, weight quantized as PyTorch's.
        rebuilt = fuselage.to_torch(str(tmp_path / "q.fsl"))
        prelu = rebuilt.prelu
        assert type(prelu) is nnq.PReLU
        assert prelu.num_parameters == 8
        assert torch.equal(prelu.weight.int_repr(), torch_prelu.weight.int_repr())
        # PyTorch 2 runs the weight observer (default_quint8_weight_qconfig's MinMax)
        # on the slopes: [-0.4, 2.2] -> scale 2.6 / 255, zero point 39.
        assert prelu.weight.q_scale() == torch_prelu.weight.q_scale() == \
            pytest.approx(2.6 / 255, rel=1e-6)
        assert prelu.weight.q_zero_point() == torch_prelu.weight.q_zero_point() == 39
        assert prelu.scale == pytest.approx(torch_prelu.scale, rel=1e-6)
        assert prelu.zero_point == torch_prelu.zero_point

        got, = run_fuselage(cli, tmp_path, tmp_path / "q.fsl", x)
        with torch.no_grad():
            rebuilt_out = rebuilt(x)
        assert torch.equal(rebuilt_out, got)  # PyTorch running fuselage's model agrees
        step = converted.conv2.scale
        steps_apart = ((got - want).abs() / step).round()
        assert steps_apart.max().item() <= 1, steps_apart.max().item()
        assert (steps_apart == 0).float().mean().item() >= 0.999
    finally:
        torch.backends.quantized.engine = engine
